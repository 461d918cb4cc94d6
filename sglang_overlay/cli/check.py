"""``check`` and ``launch``: every patch and target against the installed upstream, and the refusal.

Invariant: no rule lives here (``launch`` refuses exactly what ``check`` reports, ``core.readiness.ready()``).
Cost: one verification of the installed upstream (fingerprints from the seal or the sources).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sglang_overlay.cli.render import _table, console, err_console
from sglang_overlay.core import framework, installed, lockfile, process_hook, readiness, settings, verify
from sglang_overlay.errors import OverlayError
from sglang_overlay.version import __version__


def _check_rows(plan, dependencies: bool = False) -> list[dict]:
    """One row per target (or, with ``dependencies``, per dependency) of every patch, enabled or not; the
    dependencies end with SGLang's plugin framework (``core.framework``), which the core itself relies on."""
    rows = []
    statuses = {**plan.statuses, framework.ID: plan.framework}
    process = {p.id: p.process for p in plan.patches}
    for patch in framework.locked(plan.patches, plan.depends) if dependencies else plan.patches:
        enabled = patch.id not in plan.disabled
        found = {st.target.path: st for st in statuses.get(patch.id, []) if st.is_dependency == dependencies}
        for target in patch.depends if dependencies else patch.targets:
            st = found.get(target.path)
            rows.append(
                {
                    "patch": patch.id,
                    "process": process.get(patch.id, "any"),  # the framework: every process
                    "target": target.path,
                    "hook": f"uses ({target.needed_by})" if dependencies else target.hook_type,
                    "fingerprint": str(st.status) if st else "not checked",
                    "expected": st.expected if st else None,
                    "found": st.found if st else None,
                    "detail": st.detail if st else "",
                    "enabled": enabled,
                }
            )
    return rows


def _check_report(plan, argv: list[str] | None = None) -> dict:
    """Everything ``check`` says, as data (what ``--json`` prints)."""
    rows, dependencies = _check_rows(plan), _check_rows(plan, dependencies=True)
    problems = readiness.ready(plan, argv=argv, environment=True)
    discoverable, how = readiness.plugin_discovery()
    hook = process_hook.installed_path()
    bad = (
        []
        if any(p.fatal for p in problems)  # another release or another sglang: its targets would say nothing
        else [r for r in (*rows, *dependencies) if r["enabled"] and r["fingerprint"] != "match"]
    )
    return {
        "ok": not problems,
        "sglang": installed.installed_sglang_version(),
        "sglang_file": installed.describe(installed.sglang_identity()),
        "pin": lockfile.read_pin().version,
        "supported_pins": list(lockfile.pin_dirs()),
        "python": installed.running_python(),
        "plugin_discoverable": discoverable,
        "plugin": how,
        "process_hook": str(hook) if hook else None,
        "strict": settings.strict(),
        "version_problem": plan.version_problem,
        "readiness": problems,
        "targets": rows,
        "dependencies": dependencies,
        "problems": bad,
    }


def run_check(as_json: bool = False, argv: list[str] | None = None) -> int:
    try:
        # no launch command line: how many tokenizer workers is not told, so the hook's absence counts
        report = _check_report(verify.make_plan(), [] if argv is None else argv)
    except (OverlayError, OSError, ValueError) as exc:
        err_console.print(f"[red]sglang-overlay check: {exc}[/red]")
        return 1
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print_check(report)
    return 0 if report["ok"] else 1


_COLOUR = {"match": "green", "drift": "red", "missing": "red", "unlocked": "yellow"}


def _print_check(report: dict) -> None:
    table = _table(
        f"sglang-overlay {__version__}: patches over sglang=={report['pin']}",
        ("patch", "process", "target", "hook", "fingerprint", "enabled"),
    )
    for r in report["targets"]:
        fp = r["fingerprint"]
        table.add_row(
            r["patch"],
            r["process"],
            r["target"],
            r["hook"],
            f"[{_COLOUR.get(fp, 'white')}]{fp}[/]",
            "yes" if r["enabled"] else "[yellow]disabled[/]",
        )
    console.print(table)
    deps = report["dependencies"]
    if deps:
        moved = [r for r in deps if r["enabled"] and r["fingerprint"] != "match"]
        console.print(
            f"dependencies (upstream definitions the hooks call or override, locked like targets): "
            f"{len(deps) - len(moved)} of {len(deps)} match" + ("" if moved else " [green]ok[/]")
        )
    console.print(f"installed sglang: {report['sglang']} (pinned {report['pin']}); imports {report['sglang_file']}")
    console.print(
        f"plugin discoverable: {'yes' if report['plugin_discoverable'] else '[red]NO[/]'}: {report['plugin']}"
    )
    hook = report["process_hook"]
    console.print(f"process-start hook: {hook or '[red]NOT INSTALLED[/] (sglang-overlay process-hook --install)'}")
    console.print(f"strict: {'yes' if report['strict'] else 'no (' + settings.STRICT + '=0)'}")
    for r in report["problems"]:
        console.print(
            f"[red]{r['patch']}: {r['target']}: {r['fingerprint']} (expected {r['expected']}, found {r['found']})"
            f"{': ' + r['detail'] if r.get('detail') else ''}[/]"
        )
    for problem in report["readiness"]:
        if problem.patch is None:  # a patch's refusal is its targets' lines above
            console.print(f"[red]{problem}[/]")
    console.print("[green]OK: every enabled patch would apply[/]" if report["ok"] else "[red]NOT OK: see above[/]")


def run_launch(args: list[str]) -> int:
    cmd = [sys.executable, "-m", "sglang.launch_server", *args]
    if any(a in ("-h", "--help") for a in args):
        console.print(
            "sglang-overlay launch: verifies the overlay, then runs SGLang's launcher "
            "(python -m sglang.launch_server) with these arguments. SGLang's own options follow.\n"
        )
        return subprocess.call(cmd)
    code = run_check(argv=["sglang-overlay", *args])  # the launch's own command line: its tokenizer workers
    if code != 0:
        err_console.print("[red]sglang-overlay launch: refusing to start a server the overlay would not patch[/red]")
        return 2
    os.execv(sys.executable, cmd)
    return 0  # not reached


def run_needed(as_json: bool = False) -> int:
    """Per patch: needed (what upstream does wrong), fixed upstream, or cannot tell here (``core.needed``)."""
    from sglang_overlay.core import needed

    try:
        rows = needed.findings()
    except (LookupError, OverlayError, OSError, ValueError) as exc:
        err_console.print(f"[red]sglang-overlay check --needed: {exc}[/red]")
        return 2
    code = needed.exit_code(rows)
    if as_json:
        print(json.dumps({"sglang": installed.installed_sglang_version(), "patches": rows, "exit_code": code},
                         indent=2))  # fmt: skip
        return code
    colour = {needed.NEEDED: "green", needed.FIXED_UPSTREAM: "yellow", needed.CANNOT_TELL: "red"}
    table = _table(f"still needed on sglang=={installed.installed_sglang_version()}? (each patch's probe, without "
                   "the overlay)", ("patch", "verdict", "what upstream does"))  # fmt: skip
    for r in rows:
        verdict = f"[{colour[r['verdict']]}]{r['verdict']}[/]" + ("" if r["enabled"] else " (disabled)")
        table.add_row(r["patch"], verdict, r["evidence"])
    console.print(table)
    console.print(
        {
            0: "[green]every enabled patch is still needed[/]",
            1: '[yellow]a patch is fixed upstream: read its description\'s "When it can be dropped" and drop it[/]',
            2: "[red]a probe cannot tell here: see its line[/]",
        }[code]  # fmt: skip
    )
    return code
