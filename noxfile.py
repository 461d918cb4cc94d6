"""The CI matrix as nox sessions: the supported pin (``patches/pins/default``), and the Python the official image runs.

``.ci/run`` runs the README's two commands (the pin's environment and its default tier), then these sessions; each
can be run alone (``nox -s wheel``). One pin is supported: ``tiers`` is parametrized by it alone, so its session
keeps its name, ``tiers(pin='<default>')``.

- ``lint``: ruff (lint and format), the core's layering (import-linter contracts in pyproject.toml) and the
  README's generated tables, with the default pin's environment's tools.
- ``tiers(pin)``: the pin's environment as ``scripts/apply_patches.sh`` builds it (Python 3.11; the README's
  ``.venv``, reused when present, rebuilt with ``-- --fresh``), ``lock --check``, ``ci_slow`` whole, and every
  real-server module that does not depend on how the overlay was installed (both launchers, the abort matrix, the
  GSM8K runner and its A/B against pristine upstream, the fuzz, HiCache, ``--tp-size 2`` and two nodes on loopback;
  the launchers' servers are the abort matrix's too).
- ``wheel``: what a user of the official image does (Python 3.12): a wheel and an sdist built with ``python -m
  build``, the wheel installed into an environment nox builds with plain ``pip install sglang==<default>``
  (upstream's full dependency set, not the project's script), ``sglang-overlay check``, then the real-server
  module of the install served from that environment with the installed wheel in every server process,
  tokenizer workers included (``SGLANG_OVERLAY_TEST_INSTALLED=1``); then the GPU check's CPU rehearsal
  (``scripts/gpu_check.sh --device cpu`` with the carry, in a clean Python 3.12 environment shaped like the device).

Invariant: the sessions only read the checkout (logs and environments go under ``.nox/`` and ``.venv*/``).
Cost: see the README's "Continuous integration" (each session prints its tiers' durations).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nox

REPO = Path(__file__).resolve().parent
PINS_DIR = REPO / "patches" / "pins"
DEFAULT = (PINS_DIR / "default").read_text(encoding="utf-8").strip()
VENV = REPO / ".venv"  # the default pin's environment (scripts/apply_patches.sh)
PYTEST = ("-m", "pytest", "-p", "no:cacheprovider")
E2E = "tests/e2e/test_{}.py".format
INSTALL_E2E = tuple(map(E2E, ("00_standins", "02_tokenizer_workers")))  # served from the wheel
PIN_E2E = tuple(  # tests/e2e/test_07_demo.py is marked slow: the demo script, outside CI
    map(
        E2E,
        (
            "01_launch",
            "03_abort_matrix",
            "04_gsm8k",
            "05_fuzz",
            "06_hicache",
            "08_cluster",
            "09_owner_lanes_live",
            "10_real_model",  # last: it stops the session's tiny-model pool to make room for its own servers
        ),
    )
)
WHEEL_PYTHON = "3.12"  # SGLang's official image: Python 3.12 as python3

nox.options.sessions = []  # .ci/run names the sessions it runs
nox.options.error_on_external_run = False


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff check and format, the layers of the core, the README's generated tables."""
    bin_dir = VENV / "bin"
    session.run(str(bin_dir / "ruff"), "check", ".", external=True)
    session.run(str(bin_dir / "ruff"), "format", "--check", ".", external=True)
    session.run(str(bin_dir / "lint-imports"), "--no-cache", external=True)
    session.run(str(bin_dir / "python"), "scripts/readme_tables.py", "--check", external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, strict (mkdocs.yml): a broken link or anchor, a missing page or a page left out of
    the navigation fails. Its tools are pinned in docs/requirements.txt; the site goes to .nox/docs-site/."""
    session.install("-r", str(REPO / "docs" / "requirements.txt"))
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(REPO / ".nox" / "docs-site"), env={"NO_MKDOCS_2_WARNING": "1"}
    )


@nox.session(venv_backend="none")
@nox.parametrize("pin", [DEFAULT])
def tiers(session: nox.Session, pin: str) -> None:
    """The pin's environment from the project's script, its checks and its tiers. Arguments after ``--`` pick
    parts (none: all): ``ci_slow`` and ``e2e``; ``--fresh`` rebuilds the environment. CI runs the two parts in its
    two streams."""
    if not (VENV / "bin" / "sglang-overlay").exists() or "--fresh" in session.posargs:
        shutil.rmtree(VENV, ignore_errors=True)
        session.run(str(REPO / "scripts" / "apply_patches.sh"), "--upstream", pin, external=True)
    unknown = set(session.posargs) - {"ci_slow", "e2e", "--fresh"}
    if unknown:
        session.error(f"unknown arguments {sorted(unknown)}: name ci_slow, e2e (none: both), --fresh")
    chosen = [a for a in session.posargs if a != "--fresh"] or ["ci_slow", "e2e"]
    python, overlay = str(VENV / "bin" / "python"), str(VENV / "bin" / "sglang-overlay")
    session.run(overlay, "lock", "--check", external=True)
    for part in chosen:
        if part == "e2e":
            session.run(python, *PYTEST, "-m", "e2e and not slow", "--durations=15", *PIN_E2E, external=True)
        else:
            session.run(python, *PYTEST, "-m", "ci_slow", "--durations=10", external=True)


@nox.session(python=WHEEL_PYTHON)
def wheel(session: nox.Session) -> None:
    """The built wheel in a plain-pip environment with the default pin's sglang; check; the real servers."""
    dist = Path(session.create_tmp()) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.install("build")
    session.run("python", "-m", "build", "--outdir", str(dist), str(REPO))
    (built,) = dist.glob("sglang_overlay-*.whl")
    session.install(f"sglang=={DEFAULT}")
    session.install(f"{built}[test,gsm8k]")
    with session.chdir(dist):  # away from the checkout: the installed copy is the one on sys.path
        session.run("sglang-overlay", "check")
    session.run(
        "python",
        *PYTEST,
        "-m",
        "e2e and not slow",
        "--durations=15",
        *INSTALL_E2E,
        env={"SGLANG_OVERLAY_TEST_INSTALLED": "1", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    rehearse_gpu_check(session)


def _device_image_extras(session: nox.Session, manifest: Path, site: Path, target: Path) -> list[str]:
    """The device image's packages the carry uses that a plain ``pip install sglang`` lacks (accelerate: the
    default pin's environment has it for the real model, so the carry's trace sees it), installed ``--no-deps``
    at the default pin's CPU lock version into ``target``: the rehearsal's second source folder, or none."""
    import importlib.metadata
    import json

    from packaging.utils import canonicalize_name as norm  # nox's own dependency

    have = {norm(d.metadata["Name"]) for d in importlib.metadata.distributions(path=[str(site)])}
    lacking = sorted(set(map(norm, json.loads(manifest.read_text(encoding="utf-8"))["device_image_used"])) - have)
    if not lacking:
        return []
    lock = REPO / "scripts" / f"requirements-cpu-{DEFAULT}.lock"
    pins = {norm(line.split("==")[0]): line.strip() for line in lock.read_text(encoding="utf-8").splitlines()
            if "==" in line and not line.startswith("#")}  # fmt: skip
    unpinned = [name for name in lacking if name not in pins]
    if unpinned:
        session.error(f"the device image's {unpinned} are used by the carry but pinned nowhere ({lock.name})")
    session.run("python", "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                *(pins[name] for name in lacking))  # fmt: skip
    return [str(target)]


def rehearse_gpu_check(session: nox.Session) -> None:
    """scripts/gpu_check.sh --device cpu in a clean Python 3.12 environment shaped like the device (torch and the
    device image's packages the carry uses, linked from this session's environment; no sglang), with the carry
    built from the default pin's environment: the device's one command, found failing here first."""
    tmp = Path(session.create_tmp())
    carry, venv = tmp / "gpu_carry", tmp / "gpu312"
    session.run(str(VENV / "bin" / "python"), "scripts/gpu_carry.py", "--out", str(carry), external=True)
    (site,) = Path(session.virtualenv.location).glob("lib/python3*/site-packages")
    extras = _device_image_extras(session, carry / "manifest.json", site, tmp / "device_extras")
    session.run("python", "scripts/gpu_rehearsal_venv.py", "--venv", str(venv), "--manifest", str(carry / "manifest.json"),
                str(site), *extras)  # fmt: skip
    env = {"PYTHON": str(venv / "bin" / "python"), "GPU_CARRY": str(carry), "CARRY_SITE": str(tmp / "carry_site"),
           "OUT": str(tmp / "gpu_check")}  # fmt: skip
    session.run("bash", "scripts/gpu_check.sh", "--device", "cpu", env=env, external=True)
