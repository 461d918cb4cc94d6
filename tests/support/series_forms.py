"""The two forms of the series in tests: runtime hooks (default) and the source form.

``SGLANG_OVERLAY_TEST_FORM=source`` (read by tests/conftest.py) runs the suites
against an sglang tree that carries the diff series (PYTHONPATH puts its
``python/`` first); its marker files keep the runtime hooks off. Tests that are
about the runtime form itself skip there, with the reason below.

Helpers here build such a tree: a copy of the installed (pristine, pinned)
sglang laid out as an upstream checkout, the series applied by
``scripts/apply_patches.sh --source``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path

from sglang_overlay.core import source_form

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "scripts" / "apply_patches.sh"
FORM_ENV = "SGLANG_OVERLAY_TEST_FORM"

# nodeid prefix -> why the test means nothing in the source form
SOURCE_FORM_SKIPS = {
    "tests/core/test_overlay_cli.py": "checks the runtime form's lock, fingerprints and set-up script on the installed upstream",
    "tests/core/test_overlay_plugin.py": "checks the runtime form's hooking machinery (HookRegistry, lazy finder, strictness)",
    "tests/core/test_series_": "builds and compares both forms itself",
}


def current_form() -> str:
    form = os.environ.get(FORM_ENV, "runtime") or "runtime"
    if form not in ("runtime", "source"):
        raise ValueError(f"{FORM_ENV}={form!r}: expected 'runtime' or 'source'")
    return form


@contextmanager
def around_in_runtime_form(owner: type, attribute: str, hook, patch_id: str):
    """Install ``hook`` AROUND ``owner.attribute`` the way SGLang's HookRegistry does
    (``hook(original, self, *args, **kwargs)``, ``__wrapped__`` set) for the block, then put the original
    back. Nothing when ``patch_id`` is disabled (``SGLANG_OVERLAY_DISABLE``: the failing-first runs) or in
    the source form, whose patched sources carry the hook already."""
    from sglang_overlay.core import settings

    original = owner.__dict__[attribute]
    if patch_id in settings.disabled_patch_ids() or current_form() == "source":
        yield
        return

    @functools.wraps(original)
    def around(self, *args, **kwargs):
        return hook(original, self, *args, **kwargs)

    setattr(owner, attribute, around)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


def source_form_skip_reason(nodeid: str) -> str | None:
    for prefix, reason in SOURCE_FORM_SKIPS.items():
        if nodeid.startswith(prefix):
            return f"runtime form only ({FORM_ENV}=source): {reason}"
    return None


def form_problem(form: str) -> str | None:
    """None when the sglang this interpreter imports fits ``form``: the whole series in its sources
    (source), or none of it (runtime: a patched site-packages would silently test the source form)."""
    from sglang_overlay.core.registry import discover_patches

    package = source_form.sglang_package_dir()
    carried = source_form.applied_series(package) if package else {}
    if form == "runtime":
        if carried:
            return (f"the sglang on sys.path ({package}) carries the series {sorted(carried)}: the runtime form "
                    f"needs a pristine sglang (reinstall it), or run with {FORM_ENV}=source")
        return None
    missing = [p.id for p in discover_patches() if not p.extra and p.id not in carried]
    if missing:
        return (f"{FORM_ENV}=source but the sglang on sys.path ({package}) does not carry {missing}: put a tree "
                "patched by scripts/apply_patches.sh --source DIR first on PYTHONPATH (DIR/python)")
    return None


def pristine_package_dir() -> Path:
    package = source_form.sglang_package_dir()
    assert package is not None, "no sglang installed"
    assert not source_form.applied_series(package), f"{package} is not pristine (it carries the series)"
    return package


def upstream_copy(dest: Path) -> Path:
    """A copy of the pristine installed sglang laid out as an upstream checkout: dest/python/sglang."""
    shutil.copytree(pristine_package_dir(), dest / "python" / "sglang",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def pin_folder() -> Path:
    """The installed pin's series folder: ``patches/pins/<version>/``."""
    from sglang_overlay.core import lockfile

    return lockfile.default_lock_path().parent


def pin_args() -> list[str]:
    """``apply_patches.sh`` arguments selecting the installed pin."""
    return ["--upstream", pin_folder().name]


def apply_script(*args: str, script: Path = APPLY) -> subprocess.CompletedProcess:
    """``apply_patches.sh`` (``script``: a copy of it) for the installed pin's series."""
    return subprocess.run([str(script), *pin_args(), *args], capture_output=True, text=True, timeout=300)


def tree_hash(root: Path) -> str:
    """Hash of every file (path and bytes) under root, caches excluded."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def run_suite(selection: list[str], form: str, patched_root: Path, junit: Path, timeout: int = 900) -> dict[str, str]:
    """Run pytest on ``selection`` in a fresh interpreter in ``form``; nodeid -> outcome."""
    from tests.conftest import subprocess_env

    env = subprocess_env()
    if form == "source":
        env["PYTHONPATH"] = os.pathsep.join([str(patched_root / "python"), env["PYTHONPATH"]])
        env[FORM_ENV] = "source"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *selection],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert junit.exists(), f"pytest ({form} form) wrote no report:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return junit_outcomes(junit)


def junit_outcomes(junit: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag: child for child in case}
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if tag in kinds:
                outcome = "xfailed" if kinds[tag].get("type") == "pytest.xfail" else tag
                break
        outcomes[name] = outcome
    return outcomes
