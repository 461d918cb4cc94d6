"""A shadowed or doubled sglang is refused by ``check`` and at start-up, against real installs (tier ci_slow).

Each case is a real environment: a fresh ``python -m venv --without-pip`` that sees this environment's
site-packages through a ``.pth`` line (``site.addsitedir``: sglang and the overlay as installed here), into
which real pip installs a tiny wheel built here (a real wheel: dist-info, WHEEL, RECORD), or a working
directory holding a ``sglang/`` folder. ``check`` (``python -m sglang_overlay check``) and start-up (SGLang's
own ``load_plugins()``) run in fresh interpreters there; the control is the working directory without the
folder (``check`` OK); the default tier holds this environment's own identity (tests/core/test_readiness.py).
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from sglang_overlay.core import lockfile
from tests.support.env import overlay_cwd, subprocess_env

pytestmark = pytest.mark.ci_slow  # fresh environments and interpreters that import sglang: seconds each

START_UP = "from sglang.srt.plugins import load_plugins; load_plugins(); print('STARTED')"  # SGLang's start-up
# What SGLang's load_plugins() calls, without importing sglang first (seconds of CPU): where sglang is not yet
# imported, the rule asks find_spec instead of sys.modules; the shadow case runs the real START_UP.
PLUGIN_LOAD = "from sglang_overlay.plugin import load; load(); print('STARTED')"
REAL_SGLANG = Path(sysconfig.get_paths()["purelib"]) / "sglang"


def _wheel(tmp: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A real (pure-Python) wheel of ``name`` holding ``files``."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = tmp / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


@pytest.fixture
def fresh_env(tmp_path):
    """A new venv that sees this environment's site-packages (after its own)."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())  # fmt: skip
    (site / "zz_shared_env.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return python


def _pip_install(python: Path, wheel: Path) -> None:
    """Real pip, into the fresh venv only (``--ignore-installed``: nothing outside it is uninstalled)."""
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q", str(wheel)],
                   env=subprocess_env(), check=True, capture_output=True)  # fmt: skip


def _run(python: Path, *args: str, cwd: Path | None = None, path: Path | None = None) -> subprocess.CompletedProcess:
    """``python *args``; ``path``: a folder put before the overlay on ``PYTHONPATH``, as a user's export would."""
    env = subprocess_env()
    if path is not None:
        env["PYTHONPATH"] = f"{path}:{env['PYTHONPATH']}"
    return subprocess.run([str(python), *args], cwd=cwd or overlay_cwd(), env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def _refused(python: Path, expected: str, cwd: Path | None = None, start_up: str = PLUGIN_LOAD,
             path: Path | None = None) -> None:  # fmt: skip
    """``check`` and start-up both refuse, name the cause, and end without a traceback."""
    check = _run(python, "-m", "sglang_overlay", "check", cwd=cwd, path=path)
    out = " ".join((check.stdout + check.stderr).split())
    assert check.returncode == 1 and "cannot vouch for this sglang" in out and expected in out, out[-3000:]
    assert "Traceback" not in out
    start = _run(python, "-c", start_up, cwd=cwd, path=path)
    err = " ".join(start.stderr.split())
    assert start.returncode != 0 and "STARTED" not in start.stdout, start.stdout[-2000:]
    assert "sglang-overlay refused to start" in err and "cannot vouch for this sglang" in err and expected in err


def _ready(python: Path, cwd: Path | None = None) -> None:
    check = _run(python, "-m", "sglang_overlay", "check", cwd=cwd)
    assert check.returncode == 0 and "cannot vouch" not in check.stdout, (check.stdout + check.stderr)[-3000:]


def test_a_sglang_folder_in_the_working_directory_is_named_and_refused(tmp_path):
    """A folder that imports as sglang and reaches upstream's modules (as a source checkout would): today's
    fingerprints match through it and ``check`` said OK."""
    here = tmp_path / "work"
    (here / "sglang").mkdir(parents=True)
    (here / "sglang" / "__init__.py").write_text(f"__path__.append({str(REAL_SGLANG)!r})\n")
    _refused(Path(sys.executable), f"{here / 'sglang' / '__init__.py'}", cwd=here, start_up=START_UP)
    out = _run(Path(sys.executable), "-m", "sglang_overlay", "check", cwd=here).stdout
    assert "(the working directory) shadows the installed package" in " ".join(out.split())
    (here / "sglang" / "__init__.py").unlink()
    (here / "sglang").rmdir()
    _ready(Path(sys.executable), cwd=here)


def test_a_sglang_folder_earlier_on_pythonpath_is_named_and_refused(tmp_path):
    """The same shadow through ``PYTHONPATH`` (a source checkout exported by hand), from a neutral directory."""
    shadow = tmp_path / "src"
    (shadow / "sglang").mkdir(parents=True)
    (shadow / "sglang" / "__init__.py").write_text(f"__path__.append({str(REAL_SGLANG)!r})\n")
    _refused(Path(sys.executable), f"{shadow / 'sglang' / '__init__.py'}", start_up=START_UP, path=shadow)
    _ready(Path(sys.executable))  # the same command without the export


def test_another_distribution_shipping_the_sglang_package_is_named_and_refused(fresh_env, tmp_path):
    wheel = _wheel(tmp_path, "sglang-kt", "0.1.0", {"sglang/kt_kernels.py": "FAST = True\n"})
    _pip_install(fresh_env, wheel)
    _refused(fresh_env, "another distribution ships the top-level package sglang: sglang-kt")


def test_two_install_records_for_sglang_are_refused(fresh_env, tmp_path):
    wheel = _wheel(tmp_path, "sglang", lockfile.read_pin().version, {})  # the pinned version, once more
    _pip_install(fresh_env, wheel)
    _refused(fresh_env, "two install records for sglang")
