"""Shared pytest set-up: offline, quiet, repository root importable (tests.support).

Releases: the one way a test says which upstream it needs is where it lives. A patch's release folder
(``sglang_overlay/patches/<patch>/<folder>/``, ``RELEASE = Release(range, ...)``) has its tests in
``tests/patches/<patch>/<folder>/``, collected only where the installed sglang is in that range (the range
declared once, for the code and its tests); everything else runs on every pin. So ``pytest`` in a pin's
environment is that pin's whole suite, and the folders left out are listed at the end of the run.

Tiers (markers): the default run is in-process; ``ci_slow`` holds fresh interpreters, packaging, nested
pytest runs and quick benchmarks; ``e2e`` the real servers; ``slow`` the long runs.

Data (``tests/support/env.py``, with ``REPO`` and ``subprocess_env``): ``GSM8K_DIR`` is the small committed fixture (tests/data/gsm8k, MIT, with its notice), so a
clone with nothing beside it runs its suite. ``full_gsm8k_dir()`` finds the full splits (the
project's ``../shared/data/gsm8k``, else the runner's cache); tests that need them carry
``requires_full_gsm8k`` and are skipped, with the reason, where neither exists.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if str(Path(__file__).resolve().parent.parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.env import REPO, full_gsm8k_dir, overlay_under_test  # noqa: E402 (after the path set-up)


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
