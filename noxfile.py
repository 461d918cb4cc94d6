"""The CI matrix as nox sessions: every supported pin, and the Python the official image runs.

``.ci/run`` runs the README's two commands (the default pin's environment and its default tier), then these
sessions; each can be run alone (``nox -s wheel``). The pins are the folders of ``patches/pins/`` and the default
is ``patches/pins/default``, so a new pin joins the matrix without an edit here.

- ``lint``: ruff (lint and format), the core's layering (import-linter contracts in pyproject.toml) and the
  README's generated tables, with the default pin's environment's tools.
- ``tiers(pin)``: the pin's environment as ``scripts/apply_patches.sh`` builds it (Python 3.11; the default pin's
  is the README's ``.venv``, reused when present; an older pin's is rebuilt unless ``-- --reuse``, which
  ``.ci/run`` passes after building it), ``lock --check``, and the tiers that prove something on that
  pin. The default pin: ``ci_slow`` whole, and every real-server module that does not depend on how the overlay
  was installed (both launchers, the abort matrix, the GSM8K runner and its A/B against pristine upstream, the
  fuzz, HiCache, ``--tp-size 2`` and two nodes on loopback; the launchers' servers are the abort matrix's too). An older
  pin: its default tier, and the part of ``ci_slow`` and of the real-server tier that depends on the release,
  by one rule (``-m per_pin``: every test under ``tests/patches/``, and the tests elsewhere marked so: its
  targets hooked through ``load_plugins()``, its wheel, its probes, upstream's app; the real-server modules of
  process entry and of several ranks, with its own hook point of ``cluster-consistency``). Its HiCache hooks have
  no live path on the CPU (nothing builds the page-interleaved allocator) and run in its default tier on the
  real classes; the runner, the fuzz's differential, packaging and the demo are the same code on every pin.
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
PINS = sorted(p.name for p in PINS_DIR.iterdir() if (p / "upstream.lock").is_file())
PYTEST = ("-m", "pytest", "-p", "no:cacheprovider")
E2E = "tests/e2e/test_{}.py".format
INSTALL_E2E = tuple(map(E2E, ("00_standins", "02_tokenizer_workers")))  # served from the wheel
DEFAULT_PIN_E2E = tuple(  # tests/e2e/test_07_demo.py is marked slow: the demo script, outside CI
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
# An older pin runs what depends on the release, by one rule (the marker per_pin, tests/conftest.py): every test
# under tests/patches/ by where it lives, and the tests elsewhere that carry it: the core's checks of the
# installed release's targets, wheel, probes and routes (ci_slow), process entry and multi-rank servers (e2e).
# Packaging, the CLI, the add-a-patch and rebase walks, the GSM8K runner and the plugin's refusals (on a test
# patch) are the same code on every pin: the default pin's tiers run them.
PER_PIN = "per_pin"
WHEEL_PYTHON = "3.12"  # SGLang's official image: Python 3.12 as python3

nox.options.sessions = []  # .ci/run names the sessions it runs
nox.options.error_on_external_run = False


def _venv(pin: str) -> Path:
    return REPO / (".venv" if pin == DEFAULT else f".venv-{pin}")


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff check and format, the layers of the core, the README's generated tables."""
    bin_dir = _venv(DEFAULT) / "bin"
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
@nox.parametrize("pin", PINS)
def tiers(session: nox.Session, pin: str) -> None:
    """One pin's environment from the project's script, its checks and its tiers."""
    venv = _venv(pin)
    built = (venv / "bin" / "sglang-overlay").exists()
    reuse = pin == DEFAULT or "--reuse" in session.posargs  # .ci/run builds every environment before the streams
    if not (built and reuse) or "--fresh" in session.posargs:
        shutil.rmtree(venv, ignore_errors=True)
        session.run(str(REPO / "scripts" / "apply_patches.sh"), "--upstream", pin, external=True)
    python, overlay = str(venv / "bin" / "python"), str(venv / "bin" / "sglang-overlay")
    session.run(overlay, "lock", "--check", external=True)
    if pin != DEFAULT:
        session.run(python, *PYTEST, external=True)
    only = "" if pin == DEFAULT else f" and {PER_PIN}"
    session.run(python, *PYTEST, "-m", f"ci_slow{only}", "--durations=10", external=True)
    e2e = DEFAULT_PIN_E2E if pin == DEFAULT else ("tests/e2e",)
    session.run(python, *PYTEST, "-m", f"e2e and not slow{only}", "--durations=15", *e2e, external=True)


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
    session.run(str(_venv(DEFAULT) / "bin" / "python"), "scripts/gpu_carry.py", "--out", str(carry), external=True)
    (site,) = Path(session.virtualenv.location).glob("lib/python3*/site-packages")
    extras = _device_image_extras(session, carry / "manifest.json", site, tmp / "device_extras")
    session.run("python", "scripts/gpu_rehearsal_venv.py", "--venv", str(venv), "--manifest", str(carry / "manifest.json"),
                str(site), *extras)  # fmt: skip
    env = {"PYTHON": str(venv / "bin" / "python"), "GPU_CARRY": str(carry), "CARRY_SITE": str(tmp / "carry_site"),
           "OUT": str(tmp / "gpu_check")}  # fmt: skip
    session.run("bash", "scripts/gpu_check.sh", "--device", "cpu", env=env, external=True)
