"""The install users run: a wheel and an sdist built from this checkout with ``python -m build``, installed
non-editable with pip, carry the process-start hook; uninstall removes it, an upgrade replaces it, and a
leftover hook never breaks an interpreter.

Each environment here is a fresh ``venv`` that pip installs into from outside (``pip --python``), with
``--no-deps``: what is checked is the overlay's own files, not sglang's (CI's Python 3.12 job installs the
same wheel beside a real sglang and serves a server from it). Cost: two builds (about 10 s each) and a
few small venvs; tier ``ci_slow``.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from sglang_overlay.core.process_hook import PTH_LINE, PTH_NAME
from sglang_overlay.version import __version__
from tests.support.checkout import copy_checkout
from tests.support.env import REPO

pytestmark = pytest.mark.ci_slow

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def build(source: Path, out: Path) -> tuple[Path, Path]:
    """``python -m build`` (sdist, then the wheel from that sdist) of ``source``: (wheel, sdist)."""
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(out.glob("sglang_overlay-*.whl")), next(out.glob("sglang_overlay-*.tar.gz"))


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    return build(REPO, tmp_path_factory.mktemp("dist"))


def new_env(root: Path) -> tuple[Path, Path]:
    """A bare venv (no pip of its own): its python and its site-packages."""
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return python, Path(site)


def pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([*PIP, "--python", str(python), *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def record_of(site: Path) -> set[str]:
    (dist_info,) = site.glob("sglang_overlay-*.dist-info")
    with open(dist_info / "RECORD", newline="") as fh:
        return {row[0] for row in csv.reader(fh)}


def started(python: Path, **env: str) -> subprocess.CompletedProcess:
    """A plain interpreter start with ``env`` (the marker a server's processes pass to their children)."""
    return subprocess.run(
        [str(python), "-c", "print('started')"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
        cwd="/",
    )


def test_the_wheel_and_the_sdist_carry_the_hook_and_every_pin(dists):
    wheel, sdist = dists
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert zf.read(PTH_NAME).decode() == PTH_LINE  # the line the package checks for, at the wheel's root
    pins = {p.relative_to(REPO / "patches").as_posix() for p in (REPO / "patches" / "pins").rglob("*") if p.is_file()}
    assert {f"sglang_overlay/data/{p}" for p in pins} <= names
    import tarfile

    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    assert {"setup.py", "pyproject.toml", "sglang_overlay/core/process_hook.py", "patches/pins/default"} <= members


def test_pip_install_puts_the_hook_in_site_packages_and_in_record(dists, tmp_path):
    python, site = new_env(tmp_path / "env")
    pip(python, "install", "--no-deps", str(dists[0]))
    assert (site / PTH_NAME).read_text() == PTH_LINE
    assert PTH_NAME in record_of(site)
    # a marked interpreter of that environment starts cleanly: the hook only arms a finder
    proc = started(python, SGLANG_OVERLAY_PROCESS_START="1")
    assert proc.returncode == 0 and proc.stdout == "started\n" and proc.stderr == "", proc.stderr


def test_uninstall_removes_the_hook_and_an_upgrade_replaces_it(dists, tmp_path):
    python, site = new_env(tmp_path / "env")
    pip(python, "install", "--no-deps", str(dists[0]))
    copy = copy_checkout(tmp_path / "next")  # the next release: another version, another hook line
    version_py = copy / "sglang_overlay" / "version.py"
    text = version_py.read_text()
    assert f'__version__ = "{__version__}"' in text  # else the replace below would change nothing
    version_py.write_text(text.replace(f'__version__ = "{__version__}"', f'__version__ = "{__version__}.post1"'))
    hook_py = copy / "sglang_overlay" / "core" / "process_hook.py"
    old = hook_py.read_text()
    new = old.replace("except ImportError:\\\\n pass", "except ImportError:\\\\n  pass")
    assert new != old
    hook_py.write_text(new)
    upgrade, _ = build(copy, tmp_path / "dist-next")
    pip(python, "install", "--no-deps", str(upgrade))
    assert [p.name for p in site.glob("sglang_overlay-*.dist-info")] == [
        f"sglang_overlay-{__version__}.post1.dist-info"
    ]
    line = (site / PTH_NAME).read_text()
    assert line != PTH_LINE and "except ImportError:\\n  pass" in line
    pip(python, "uninstall", "-y", "sglang-overlay")
    assert not (site / PTH_NAME).exists() and not list(site.glob("sglang_overlay*"))


def test_a_leftover_hook_never_breaks_an_interpreter(tmp_path):
    """The hook file without the package (installed by hand, then the package removed): the marker is
    inherited, the import fails, and the interpreter starts without a word."""
    python, site = new_env(tmp_path / "env")
    (site / PTH_NAME).write_text(PTH_LINE)
    for env in ({}, {"SGLANG_OVERLAY_PROCESS_START": "4242"}):
        proc = started(python, **env)
        assert proc.returncode == 0 and proc.stdout == "started\n" and proc.stderr == "", (env, proc.stderr)


def test_an_editable_install_has_no_hook_of_its_own(tmp_path):
    """Why ``apply_patches.sh --editable`` writes the hook itself: setuptools' editable wheel carries only a
    path finder, not the build's extra files."""
    python, site = new_env(tmp_path / "env")
    src = copy_checkout(tmp_path / "src")  # the tracked files only: no environments, no .nox/ with its sockets
    pip(python, "install", "--no-deps", "-e", str(src))
    assert not (site / PTH_NAME).exists()


def _overlay_env(root: Path, wheel: Path, sglang: str) -> Path:
    """A venv with the built overlay (and its dependencies) and ``sglang`` installed ``--no-deps``."""
    python, _ = new_env(root)
    pip(python, "install", "--no-deps", str(wheel), sglang)
    pip(python, "install", "packaging", "rich", "psutil", "httpx")
    return python


def overlay(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python.parent / "sglang-overlay"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        env={"PATH": f"{python.parent}:/usr/bin:/bin", "COLUMNS": "200"},
    )


def test_an_unsupported_sglang_is_refused_by_name_at_check_and_at_launch(dists, tmp_path):
    """sglang 0.5.22, a real release the overlay has no pin for, installed as a user might (here without its
    dependencies, so it does not even import): a clear refusal naming it and the supported pins, no traceback."""
    from sglang_overlay.core import lockfile

    pins = list(lockfile.pin_dirs())  # oldest first, as the refusal lists them
    assert "0.5.22" not in pins
    python = _overlay_env(tmp_path / "env", dists[0], "sglang==0.5.22")
    for proc in (overlay(python, "check"), overlay(python, "launch", "--model-path", "m")):
        text = proc.stdout + proc.stderr
        assert proc.returncode in (1, 2) and "Traceback" not in text, text[-3000:]
        assert "does not support the installed sglang 0.5.22" in text, text[-3000:]
        assert "supported pins: " + ", ".join(f"sglang=={v}" for v in pins) in text, text[-3000:]
    assert "refusing to start a server the overlay would not patch" in proc.stderr


def test_a_supported_sglang_that_does_not_import_is_named_as_such(dists, tmp_path):
    """The default pin's sglang installed --no-deps: its sources match every fingerprint, but it cannot run (no
    torch); check says so, with the import error, instead of passing or printing a traceback."""
    from sglang_overlay.core import lockfile

    version = lockfile.default_version()
    cached = Path.home() / ".cache" / "sglang-overlay" / "wheels"
    entry = lockfile.read_pin(lockfile.pin_dir(version) / "upstream.lock").wheels["%d.%d" % sys.version_info[:2]]
    wheel = cached / entry["file"]
    python = _overlay_env(tmp_path / "env", dists[0], str(wheel) if wheel.is_file() else f"sglang=={version}")
    proc = overlay(python, "check")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in text, text[-3000:]
    assert f"sglang {version} is installed but does not import" in text and "No module named" in text, text[-3000:]
    assert "match" in text and "drift" not in text  # the sources themselves are the pinned ones
