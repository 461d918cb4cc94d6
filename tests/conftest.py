"""Shared pytest set-up: offline, quiet, repository root importable (tests.support).

Releases: the one way a test says which upstream it needs is where it lives. A patch's release folder
(``sglang_overlay/patches/<patch>/<folder>/``, ``RELEASE = Release(range, ...)``) has its tests in
``tests/patches/<patch>/<folder>/``, collected only where the installed sglang is in that range (the range
declared once, for the code and its tests); everything else runs on every pin. So ``pytest`` in either
pin's environment is that pin's whole suite, and the folders left out are listed at the end of the run.

Tiers (markers): the default run is in-process; ``ci_slow`` holds fresh interpreters, packaging, nested
pytest runs and quick benchmarks; ``e2e`` the real servers; ``slow`` the long runs.

Data: ``GSM8K_DIR`` is the small committed fixture (tests/data/gsm8k, MIT, with its notice), so a
clone with nothing beside it runs its suite. ``full_gsm8k_dir()`` finds the full splits (the
project's ``../shared/data/gsm8k``, else the runner's cache); tests that need them carry
``requires_full_gsm8k`` and are skipped, with the reason, where neither exists.
"""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
GSM8K_DIR = REPO / "tests" / "data" / "gsm8k"
_FULL_GSM8K_CANDIDATES = (SHARED / "data" / "gsm8k", Path.home() / ".cache" / "sglang-overlay" / "gsm8k")


def full_gsm8k_dir() -> Path | None:
    """The full GSM8K splits (1,319 test / 7,473 train), or None where no copy exists here."""
    for candidate in _FULL_GSM8K_CANDIDATES:
        if (candidate / "test.jsonl").is_file() and (candidate / "train.jsonl").is_file():
            return candidate
    return None


requires_full_gsm8k = pytest.mark.skipif(
    full_gsm8k_dir() is None,
    reason="needs the full GSM8K splits: ../shared/data/gsm8k beside the checkout, or the runner's cache "
    "(~/.cache/sglang-overlay/gsm8k, filled by `sglang-overlay gsm8k` when online)",
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


# SGLANG_OVERLAY_TEST_INSTALLED=1: fresh interpreters and real servers run the overlay installed in this
# environment (a wheel, as users install it) instead of this checkout's sources; CI sets it where it
# installs the built wheel into an environment the project's script did not build.
INSTALLED_ENV = "SGLANG_OVERLAY_TEST_INSTALLED"


def overlay_under_test() -> str:
    """ "installed" or "checkout": which copy of the overlay fresh interpreters and servers import."""
    return "installed" if os.environ.get(INSTALLED_ENV, "").strip() in ("1", "true", "yes") else "checkout"


def overlay_path() -> list[str]:
    """What goes first on PYTHONPATH for the overlay under test (nothing for the installed one)."""
    return [str(REPO)] if overlay_under_test() == "checkout" else []


def overlay_cwd() -> Path:
    """Where fresh interpreters start: the checkout, unless the installed overlay is under test (``python -m``
    and ``-c`` put their working directory first on sys.path, where the checkout would shadow it)."""
    return REPO if overlay_under_test() == "checkout" else Path.home()


def subprocess_env(**extra: str) -> dict:
    """Environment for a fresh interpreter running the overlay under test (this checkout, by default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_")}
    env.pop("SGLANG_PLUGINS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*overlay_path(), env.get("PYTHONPATH", "")]))
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env


def _installed_sglang() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


_RELEASES: dict = {}  # tests/patches/<package>/<folder> -> the Release it tests (from the declarations)
NOT_COLLECTED: list[str] = []  # release test folders left out here, with the range (printed in the header)


def _release_dirs() -> dict:
    if not _RELEASES:
        from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches

        for patch in discover_patches(ANY_UPSTREAM):
            for release in patch.releases:
                _RELEASES[REPO / "tests" / "patches" / patch.package.rsplit(".", 1)[-1] / release.folder] = release
    return _RELEASES


def pytest_ignore_collect(collection_path, config):
    """A release folder's tests are collected only where the installed sglang is in the folder's range."""
    release = _release_dirs().get(Path(collection_path))
    if release is None:
        return None
    installed = _installed_sglang()
    if installed is None or not release.applies_to(installed):
        left_out = f"{Path(collection_path).relative_to(REPO)} (sglang{release.upstream})"
        if left_out not in NOT_COLLECTED:
            NOT_COLLECTED.append(left_out)
        return True
    return None


def pytest_collection_modifyitems(config, items):
    """Every test under ``tests/patches/`` is ``per_pin`` by where it lives (a patch's code and tests are the
    release's); elsewhere the marker is written on the test. An older pin's nox session selects by it."""
    patches = REPO / "tests" / "patches"
    for item in items:
        if item.path.is_relative_to(patches):
            item.add_marker(pytest.mark.per_pin)


def pytest_report_header(config):
    full = full_gsm8k_dir()
    return [
        f"installed sglang {_installed_sglang()}, fresh interpreters run the {overlay_under_test()} overlay",
        f"full GSM8K splits: {full or 'none here (tests that need them are skipped)'}",
    ]


def pytest_terminal_summary(terminalreporter):
    if NOT_COLLECTED:
        terminalreporter.write_line(
            f"release folders not collected for the installed sglang {_installed_sglang()}: " + ", ".join(NOT_COLLECTED)
        )
