"""Shared pytest set-up: offline, quiet, repository root importable (tests.support).

Pins: a module named ``test_v<major>_<minor>_<patch>*.py`` (``test_v0_5_23.py``) tests one supported
upstream pin's implementation; it is collected only where that sglang is installed. A test (or a module's
``pytestmark``) that drives one range of releases carries ``@pytest.mark.upstream("<0.5.23", why=...)``
and is skipped, with the range and the reason, under any other; so ``pytest`` in either pin's environment
is that pin's whole suite.

Data: ``GSM8K_DIR`` is the small committed fixture (tests/data/gsm8k, MIT, with its notice), so a
clone with nothing beside it runs its suite. ``full_gsm8k_dir()`` finds the full splits (the
project's ``../shared/data/gsm8k``, else the runner's cache); tests that need them carry
``requires_full_gsm8k`` and are skipped, with the reason, where neither exists.
"""

import os
import re
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
    """"installed" or "checkout": which copy of the overlay fresh interpreters and servers import."""
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


# --------------------------------------------------------------------------- the two forms of the series
# SGLANG_OVERLAY_TEST_FORM=source runs the suites against an sglang tree carrying the diff series
# (tests/support/series_forms.py); tests about the runtime form itself skip there, with the reason.


def pytest_configure(config):
    from tests.support.series_forms import current_form, form_problem

    try:
        problem = form_problem(current_form())
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc
    if problem:
        raise pytest.UsageError(problem)


def _installed_sglang() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


_PIN_MODULE = re.compile(r"^test_v(\d+)_(\d+)_(\d+)(_\w+)?\.py$")


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
    """A release folder's tests (``tests/patches/<patch>/<folder>/``, the folder of the patch's code for one
    upstream design) are collected only where the installed sglang is in that folder's declared range: the
    range of its ``Release``, declared once, selects the code and its tests alike.

    ``test_v0_5_23*.py`` holds one pin's tests (sglang 0.5.23 here): collected only where that sglang
    is installed, ignored (neither run nor skipped: nothing is missing) under any other."""
    release = _release_dirs().get(Path(collection_path))
    if release is not None:
        installed = _installed_sglang()
        if installed is None or not release.applies_to(installed):
            NOT_COLLECTED.append(f"{Path(collection_path).relative_to(REPO)} (sglang{release.upstream})")
            return True
        return None
    match = _PIN_MODULE.match(collection_path.name)
    if match is None:
        return None
    return True if ".".join(match.groups()[:3]) != _installed_sglang() else None


def upstream_skip_reason(item, installed: str | None) -> str | None:
    """Why ``item`` does not run here: it carries ``@pytest.mark.upstream(SPEC, why=...)`` (a module's
    ``pytestmark`` or a test's) and the installed sglang is outside SPEC (``"<0.5.23"``: it drives that
    pin's classes, or pins that release's upstream behaviour; the other pin has its own tests)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    for mark in item.iter_markers("upstream"):
        spec = SpecifierSet(mark.args[0])
        if installed is None or not spec.contains(Version(installed), prereleases=True):
            return f"for sglang{spec}, installed {installed}: {mark.kwargs.get('why', '')}".rstrip(": ")
    return None


def pytest_collection_modifyitems(config, items):
    from tests.support.series_forms import current_form, source_form_skip_reason

    installed = _installed_sglang()
    for item in items:
        reason = upstream_skip_reason(item, installed)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
    if current_form() != "source":
        return
    for item in items:
        reason = source_form_skip_reason(item.nodeid)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_report_header(config):
    from tests.support.series_forms import current_form

    full = full_gsm8k_dir()
    return [f"sglang-overlay form: {current_form()}, installed sglang {_installed_sglang()}, "
            f"fresh interpreters run the {overlay_under_test()} overlay",
            f"full GSM8K splits: {full or 'none here (tests that need them are skipped)'}"]


def pytest_terminal_summary(terminalreporter):
    if NOT_COLLECTED:
        terminalreporter.write_line(f"release folders not collected for the installed sglang {_installed_sglang()}: "
                                    + ", ".join(NOT_COLLECTED))
