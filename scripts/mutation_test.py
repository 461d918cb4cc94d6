#!/usr/bin/env python3
"""Mutation testing of the patches' implementation modules with mutmut 3, one targeted run per patch.

For each patch (``moe``, ``abort``, ``hicache``, ``cluster``) on the installed sglang (its root's modules and
those of the release folder serving the installed release, from the registry; run it in each pin's
environment) this copies the checkout's sources and tests into
a work folder (default ``mutants/<patch>/`` in the checkout, which git should ignore), writes a
``setup.cfg`` ``[mutmut]`` section there, and runs ``mutmut run`` in it. mutmut copies that work
folder again into its own ``mutants/`` and runs pytest there: the real sources are never
written, so people running tests on them meanwhile are unaffected (``mutmut apply``, which
writes a mutant back into a source file, is never called). Only the patch's implementation
modules are mutated, and only the patch's own tests run (mutmut maps each mutated function to
the tests that call it, so a mutant runs a handful of tests, in a process forked from one
that has already imported sglang and torch).

Tests that exercise a module only in a subprocess (the scripted HTTP server, the LoRA driver)
are invisible to mutmut's call mapping, which reports their mutants as "no tests". For those,
``--subprocess-fallback`` runs the patch's subprocess tests once per such mutant, with mutmut's
``MUTANT_UNDER_TEST`` set (the trampolines in the child process read it), and records killed
or survived.

Survivors judged equivalent (no test can tell them apart from the original) are listed with the
reason in ``tests/support/mutation_equivalents.py``; the score counts them apart:
``score = killed / (total - equivalent)``.

    .venv/bin/python scripts/mutation_test.py --patches moe abort --json out/mutation.json
    .venv/bin/python scripts/mutation_test.py --patches abort --subprocess-fallback
    .venv/bin/python scripts/mutation_test.py --patches hicache --max-children 2
    .venv/bin/python scripts/mutation_test.py --patches hicache --sample 300 --seed 1   # a seeded random sample

``--sample N`` tests a seeded random sample of N of a patch's mutants (all of them where it has fewer), for
patches whose whole run takes hours on 2 cores: mutmut first generates every mutant (testing the first of each
function, ``*__mutmut_1``, to do so), then tests the sampled ones; the score counts the sample alone and comes
with its 95% Wilson interval. A survivor outside the sample goes unseen: say so where the score is quoted.

Prints a table per module and, with ``--json FILE``, writes the per-module counts, the survivors
with their diffs, and the command. Files are written only under the work folder and where
``--json`` says. Exit status: 0 when every module reaches ``--goal`` (default 0.9), else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
from mutation_report import patch_score, print_table, summarize  # noqa: E402
from mutation_targets import DECLARED, Target, resolve  # noqa: E402

COPY = ("sglang_overlay", "tests", "patches", "scripts", "pyproject.toml")


def setup_cfg(target: Target, limits: tuple = (120.0, 15.0)) -> str:
    def lines(key: str, values) -> str:
        return f"{key} =\n" + "".join(f"    {v}\n" for v in values)

    return (
        "[mutmut]\n"
        + lines("source_paths", ["sglang_overlay"])
        + lines("only_mutate", target.modules)
        + lines("pytest_add_cli_args_test_selection", target.tests)
        + lines(
            "pytest_add_cli_args",
            ["-p", "no:cacheprovider"] + (["-k", target.deselect] if target.deselect else []),
        )
        + lines("also_copy", ["patches/", "scripts/"])
        + "process_isolation = forkserver\n"
        # mutmut's CPU limit per mutant is (the tests' call time + timeout_constant) x timeout_multiplier x 2;
        # each forked run also sets its fixtures up (sglang import, model construction), seconds of CPU.
        # mutmut tests the slowest mutants last, where a mutant that loops spends the whole limit.
        + f"timeout_constant = {limits[0]:g}\n"
        + f"timeout_multiplier = {limits[1]:g}\n"
        + "use_git_change_detection = false\n"
    )


def prepare(workdir: Path, target: Target, fresh: bool, limits: tuple = (120.0, 15.0)) -> None:
    """A copy of the checkout's sources and tests, with the [mutmut] config (never the real tree)."""
    if fresh and workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "mutants")
    for name in COPY:
        src, dst = REPO / name, workdir / name
        if dst.exists():
            shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
        if src.is_dir():
            shutil.copytree(src, dst, ignore=ignore)
        else:
            shutil.copy2(src, dst)
    (workdir / "setup.cfg").write_text(setup_cfg(target, limits))


def child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_OVERLAY_", "MUTANT_UNDER_TEST"))}
    env.pop("SGLANG_PLUGINS", None)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def mutmut(workdir: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("mutmut")
    return subprocess.run([str(exe), *args], cwd=workdir, env=child_env(), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def run_mutmut(workdir: Path, name: str, argv: list[str], timeout: float) -> None:
    try:
        proc = mutmut(workdir, *argv, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"mutmut run for {name} passed --timeout ({timeout:g} s); the verdicts so far are kept in "
                         f"{workdir}: run again with --resume (and a larger --timeout) to finish") from None  # fmt: skip
    with open(workdir / "mutmut-run.log", "a") as log:
        log.write(f"$ mutmut {' '.join(argv[:3])} ...\n{proc.stdout}\n--- stderr ---\n{proc.stderr}\n")
    if proc.returncode != 0:
        raise SystemExit(f"mutmut run failed for {name} (exit {proc.returncode}); see {workdir / 'mutmut-run.log'}:\n"
                         + (proc.stdout + proc.stderr)[-3000:])  # fmt: skip


def statuses(workdir: Path, module: str) -> dict[str, str]:
    from mutmut.stats import status_by_exit_code

    meta = workdir / "mutants" / (module + ".meta")
    if not meta.exists():
        return {}
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    return {name: status_by_exit_code[code] for name, code in codes.items()}


def run_in_subprocess(workdir: Path, mutant: str, pytest_args: tuple[str, ...], timeout: float) -> str:
    """The patch's subprocess tests with one mutant active (mutmut's trampolines read the variable)."""
    env = child_env() | {"MUTANT_UNDER_TEST": mutant}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(workdir / "mutants"), env.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "", *pytest_args],
                              cwd=workdir / "mutants", env=env, capture_output=True, text=True, timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "timeout"
    return {0: "survived", 1: "killed"}.get(proc.returncode, f"suspicious (pytest exit {proc.returncode})")


def diff_of(workdir: Path, mutant: str) -> str:
    proc = mutmut(workdir, "show", mutant, timeout=120)
    return proc.stdout.strip()


def sample_of(workdir: Path, target: Target, name: str, args) -> set[str] | None:
    """The seeded sample of ``name``'s mutants (``--sample``), all generated and the sampled ones tested; None
    without ``--sample``."""
    if not args.sample:
        return None
    run = ["run", "--max-children", str(args.max_children)]
    found = {m: s for module in target.modules for m, s in statuses(workdir, module).items()}
    if not found:  # not generated yet (a --resume run has them)
        run_mutmut(workdir, name, [*run, "*__mutmut_1"], args.timeout)  # generates every mutant
        found = {m: s for module in target.modules for m, s in statuses(workdir, module).items()}
    chosen = random.Random(f"{args.seed}:{name}").sample(sorted(found), min(args.sample, len(found)))
    pending = sorted(m for m in chosen if found[m] == "not checked")
    if pending:
        run_mutmut(workdir, name, [*run, *pending], args.timeout)
    return set(chosen)


def run_patch(name: str, args) -> list[dict]:
    from sglang_overlay.core.installed import installed_sglang_version

    target = resolve(DECLARED[name], installed_sglang_version())
    workdir = args.workdir / name
    earlier = {m: s for module in target.modules for m, s in statuses(workdir, module).items()} if args.resume else {}
    prepare(workdir, target, fresh=not args.resume, limits=(args.timeout_constant, args.timeout_multiplier))
    t0 = time.monotonic()
    chosen = sample_of(workdir, target, name, args)
    if chosen is None:
        run_mutmut(workdir, name, ["run", "--max-children", str(args.max_children)], args.timeout)
    # --resume keeps mutmut's verdicts of unchanged functions: give the earlier survivors the new tests
    again = sorted(m for m, s in earlier.items() if s in ("survived", "no tests"))
    if again:
        run_mutmut(workdir, name, ["run", "--max-children", str(args.max_children), *again], args.timeout)
    rows = []
    for module in target.modules:
        found = statuses(workdir, module)
        generated = len(found)
        if chosen is not None:
            found = {m: s for m, s in found.items() if m in chosen}
        if args.subprocess_fallback and target.subprocess_tests:
            for mutant in sorted(m for m, s in found.items() if s == "no tests"):
                found[mutant] = run_in_subprocess(workdir, mutant, target.subprocess_tests, args.fallback_timeout)
        row = summarize(module, found)
        row.update(patch=name, generated=generated, sampled=chosen is not None, seconds=round(time.monotonic() - t0, 1))
        row["survivor_diffs"] = {m: diff_of(workdir, m) for m in row["survivors"]}
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patches", nargs="+", choices=sorted(DECLARED), default=["moe", "abort"])
    ap.add_argument("--workdir", type=Path, default=REPO / "mutants", help="work folders go here (default: mutants/)")
    ap.add_argument("--max-children", type=int, default=2, help="mutants tested in parallel (default 2)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one patch's mutmut run may take")
    ap.add_argument(
        "--subprocess-fallback",
        action="store_true",
        help="run the patch's subprocess tests for each mutant mutmut found no in-process test for",
    )
    ap.add_argument("--fallback-timeout", type=float, default=300)
    ap.add_argument(
        "--timeout-constant",
        type=float,
        default=120.0,
        help="mutmut's timeout_constant, seconds added to a mutant's test time (default 120)",
    )
    ap.add_argument(
        "--timeout-multiplier",
        type=float,
        default=15.0,
        help="mutmut's timeout_multiplier (default 15): a mutant's CPU limit is "
        "(test time + constant) x multiplier x 2; a mutant over it counts as killed (timeout)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep mutmut's earlier results in the work folder (changed functions and earlier survivors "
        "are tested again, with the current tests)",
    )
    ap.add_argument("--sample", type=int, metavar="N", help="test a seeded random sample of N mutants per patch")
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    ap.add_argument("--goal", type=float, default=0.9)
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON to FILE")
    args = ap.parse_args(argv)
    if args.workdir.resolve() == REPO:
        raise SystemExit("--workdir must not be the checkout itself")

    rows = []
    for name in args.patches:
        rows += run_patch(name, args)
    print_table(rows, args.goal)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        command = "scripts/mutation_test.py " + " ".join(argv if argv is not None else sys.argv[1:])
        patches = {
            p: patch_score([r for r in rows if r["patch"] == p]) for p in dict.fromkeys(r["patch"] for r in rows)
        }
        args.json.write_text(json.dumps(dict(command=command, goal=args.goal, patches=patches, modules=rows), indent=2)
                             + "\n")  # fmt: skip
        print(f"wrote {args.json}")
    return 0 if all(r["score"] >= args.goal for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
