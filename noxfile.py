"""The CI matrix as nox sessions: every supported pin, and the Python the official image runs.

``.ci/run`` runs the README's two commands (the default pin's environment and its default tier), then
these sessions; each can be run alone (``nox -s wheel``). The pins are the folders of ``patches/pins/``
and the default is ``patches/pins/default``, so a new pin joins the matrix without an edit here.

- ``tiers(pin)``: the pin's environment as ``scripts/apply_patches.sh`` builds it (Python 3.11; the
  default pin's is the README's ``.venv``, reused when present), then ``check``, ``lock --check`` and
  ``series --check``, and the tiers that prove something on that pin: the default tier (skipped for the
  default pin, whose default tier the README's command ran), ``ci_slow``, and, for an older pin, the
  real-server modules that exercise that pin's own code: process entry (launchers, tokenizer workers),
  the abort matrix (0.5.20 has its own abort implementation) and HiCache (its own cache hooks). The
  default pin runs the whole real-server tier in ``wheel``; the modules left out here (the GSM8K runner
  and its A/B, the fuzz's differential, the demo) drive client-side or checkout tooling that is the same
  code on every pin.
- ``wheel``: what a user of the official image does (Python 3.12): a wheel and an sdist built with
  ``python -m build``, the wheel installed into an environment nox builds with plain ``pip install
  sglang==<default>`` (upstream's full dependency set, not the project's script), ``sglang-overlay check``,
  then the real-server ``e2e`` tier run from that environment with the installed wheel in every server
  process (``SGLANG_OVERLAY_TEST_INSTALLED=1``).

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
PINS = sorted(p.name for p in PINS_DIR.iterdir() if (p / "upstream.lock").is_file())
PYTEST = ("-m", "pytest", "-p", "no:cacheprovider")
E2E_OF_AN_OLDER_PIN = tuple(f"tests/e2e/{m}.py" for m in ("test_00_standins", "test_01_launch",
                                                          "test_02_tokenizer_workers", "test_03_abort_matrix",
                                                          "test_06_hicache"))
WHEEL_PYTHON = "3.12"  # SGLang's official image: Python 3.12 as python3

nox.options.sessions = []  # .ci/run names the sessions it runs
nox.options.error_on_external_run = False


def _venv(pin: str) -> Path:
    return REPO / (".venv" if pin == DEFAULT else f".venv-{pin}")


@nox.session(venv_backend="none")
@nox.parametrize("pin", PINS)
def tiers(session: nox.Session, pin: str) -> None:
    """One pin's environment from the project's script, its checks and its tiers."""
    venv = _venv(pin)
    if pin != DEFAULT or not (venv / "bin" / "sglang-overlay").exists() or "--fresh" in session.posargs:
        shutil.rmtree(venv, ignore_errors=True)
        session.run(str(REPO / "scripts" / "apply_patches.sh"), "--upstream", pin, external=True)
    python, overlay = str(venv / "bin" / "python"), str(venv / "bin" / "sglang-overlay")
    session.run(overlay, "lock", "--check", external=True)
    session.run(overlay, "series", "--check", external=True)
    if pin != DEFAULT:
        session.run(python, *PYTEST, external=True)
    session.run(python, *PYTEST, "-m", "ci_slow", "--durations=10", external=True)
    if pin != DEFAULT:
        session.run(python, *PYTEST, "-m", "e2e and not slow", "--durations=15", *E2E_OF_AN_OLDER_PIN,
                    external=True)


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
    session.run("python", *PYTEST, "-m", "e2e and not slow", "--durations=15",
                env={"SGLANG_OVERLAY_TEST_INSTALLED": "1", "PYTHONDONTWRITEBYTECODE": "1"})

