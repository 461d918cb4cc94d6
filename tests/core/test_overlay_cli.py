"""The sglang-overlay command as a user runs it from the shell, and the pin/lock checks (tier ci_slow)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from importlib.metadata import distribution
from pathlib import Path

import pytest

from sglang_overlay.core import fingerprint, lockfile
from tests.support.demo import DEMO_TARGET, demo_env
from tests.support.env import REPO
from tests.support.proc import run_cli

pytestmark = pytest.mark.ci_slow  # the console script in fresh interpreters: seconds each


def test_installed_upstream_matches_the_lock():
    """Fails when the installed upstream is not what its pin's lock records."""
    proc = run_cli("lock", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pin = lockfile.read_pin()
    assert distribution("sglang").version == pin.version


def test_installed_target_modules_are_the_wheels_files():
    """Each hooked module on disk has the sha256 the pinned wheel's RECORD says (no local edits)."""
    import base64
    import hashlib

    dist = distribution("sglang")
    record = {}
    for line in dist.read_text("RECORD").splitlines():
        name, digest, _ = line.rsplit(",", 2)
        record[name] = digest
    lock = lockfile.read_lock()
    modules = {entry["module"] for entry in lock["targets"].values()} | {"sglang.srt.plugins.hook_registry"}
    for module in modules:
        member = fingerprint.module_file_in_wheel(module)
        algo, _, expected = record[member].partition("=")
        data = Path(dist.locate_file(member)).read_bytes()
        got = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
        assert got == expected, f"{member} differs from the pinned wheel"


def test_check_prints_the_table_and_passes():
    proc = run_cli("check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK: every enabled patch would apply" in proc.stdout
    assert "plugin discoverable: yes" in proc.stdout
    for patch in json.loads(run_cli("check", "--json").stdout)["targets"]:
        assert patch["fingerprint"] == "match"


def test_check_says_when_sglang_plugins_would_skip_the_overlay():
    proc = run_cli("check", SGLANG_PLUGINS="some_other_plugin")
    assert proc.returncode == 1
    assert "does not name 'sglang_overlay'" in proc.stdout and "skip the overlay silently" in proc.stdout
    assert run_cli("check", SGLANG_PLUGINS="some_other_plugin,sglang_overlay").returncode == 0


def test_check_reports_drift_per_target(demo_lock, tmp_path):
    data = json.loads(demo_lock.read_text())
    data["targets"][DEMO_TARGET]["fingerprint"] = "sha256:" + "3" * 64
    lock = tmp_path / "drift.lock"
    lock.write_text(json.dumps(data))
    proc = run_cli("check", "--json", **demo_env(lock))
    assert proc.returncode == 1
    rows = {r["target"]: r for r in json.loads(proc.stdout)["targets"]}
    assert rows[DEMO_TARGET]["fingerprint"] == "drift"
    assert rows[DEMO_TARGET]["expected"] == "sha256:" + "3" * 64
    # A disabled drifted patch does not block.
    assert run_cli("check", **demo_env(lock, SGLANG_OVERLAY_DISABLE="demo-radix-key")).returncode == 0


def test_launch_help_shows_overlay_and_sglang_options():
    proc = run_cli("launch", "--help", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "sglang-overlay launch: verifies the overlay" in proc.stdout
    assert "--model-path" in proc.stdout


def test_launch_refuses_when_the_overlay_would_be_skipped():
    proc = run_cli("launch", "--model-path", "/nonexistent", SGLANG_PLUGINS="other")
    assert proc.returncode == 2
    assert "refusing to start a server the overlay would not patch" in proc.stderr


def _wheel_from_installed(tmp_path: Path, edits: dict[str, tuple[str, str] | None]) -> Path:
    """A small local sglang wheel: the installed target modules, some edited or left out."""
    import sglang

    root = Path(sglang.__file__).parent.parent
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for member in ("sglang/srt/mem_cache/radix_cache.py",):
            if member in edits and edits[member] is None:
                continue
            text = (root / member).read_text()
            if member in edits:
                old, new = edits[member]
                assert old in text
                text = text.replace(old, new, 1)
            zf.writestr(member, text)
    return wheel


def test_rebase_check_reports_match_drift_and_missing_in_checks_words(demo_lock, tmp_path):
    env = demo_env(demo_lock)
    (tmp_path / "a").mkdir()
    same = _wheel_from_installed(tmp_path / "a", {})
    proc = run_cli("rebase-check", "--wheel", str(same), "--json", **env)
    rows = {r["target"]: r["status"] for r in json.loads(proc.stdout)["targets"]}
    assert rows[DEMO_TARGET] == "match"
    (tmp_path / "b").mkdir()
    changed = _wheel_from_installed(
        tmp_path / "b",
        {
            "sglang/srt/mem_cache/radix_cache.py": (
                "def page_aligned(self, page_size: int) -> RadixKey:\n",
                "def page_aligned(self, page_size: int) -> RadixKey:\n        page_size = max(page_size, 1)\n",
            )
        },
    )
    proc = run_cli("rebase-check", "--wheel", str(changed), **env)
    assert proc.returncode == 1
    assert "drift" in proc.stdout
    rows = {
        r["target"]: r["status"]
        for r in json.loads(run_cli("rebase-check", "--wheel", str(changed), "--json", **env).stdout)["targets"]
    }
    assert rows[DEMO_TARGET] == "drift"
    (tmp_path / "c").mkdir()
    gone = _wheel_from_installed(tmp_path / "c", {"sglang/srt/mem_cache/radix_cache.py": None})
    rows = {
        r["target"]: r["status"]
        for r in json.loads(run_cli("rebase-check", "--wheel", str(gone), "--json", **env).stdout)["targets"]
    }
    assert rows[DEMO_TARGET] == "missing"


def test_apply_script_reads_the_pin_from_the_lock():
    script = str(REPO / "scripts" / "apply_patches.sh")
    python = "%d.%d" % sys.version_info[:2]
    for version, folder in [(None, lockfile.pin_dir(lockfile.default_version())), *lockfile.pin_dirs().items()]:
        extra = ["--upstream", version] if version else []  # none: the default pin (patches/pins/default)
        out = subprocess.run(
            [script, "--print-pin", "--python", sys.executable, *extra], capture_output=True, text=True, check=True
        ).stdout
        pin = lockfile.read_pin(folder / lockfile.LOCK_NAME)
        assert f"sglang=={pin.version} torch=={pin.torch} torchvision=={pin.torchvision} python {python}" in out
        assert f"wheel {pin.wheels[python]['file']} sha256 {pin.wheels[python]['sha256']}" in out


def test_apply_script_refuses_unsupported_python_and_unknown_flags(tmp_path):
    fake = tmp_path / "python-3.9"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = -c ]; then case "$2" in *version_info*) echo 3.9; exit 0;; esac; fi\nexec python3 "$@"\n'
    )
    fake.chmod(0o755)
    proc = subprocess.run(
        [str(REPO / "scripts" / "apply_patches.sh"), "--python", str(fake), "--venv", str(tmp_path / "v")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "Python 3.9 (" in proc.stderr and "is not supported" in proc.stderr
    assert "records wheels for Python 3.11 3.12" in proc.stderr
    assert not (tmp_path / "v").exists()
    proc = subprocess.run([str(REPO / "scripts" / "apply_patches.sh"), "--bogus"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown argument '--bogus'" in proc.stderr


def test_apply_script_refuses_a_conflicting_sglang_in_the_environment(tmp_path):
    """An environment that already holds another sglang is refused before anything is installed."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$2" in *version_info*) echo 3.11;; *metadata*) echo 0.5.19;; *) echo unexpected "$@" >&2; exit 9;; esac\n'
    )
    fake.chmod(0o755)
    proc = subprocess.run(
        [str(REPO / "scripts" / "apply_patches.sh"), "--venv", str(venv)], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "a conflicting sglang 0.5.19 is already installed" in proc.stderr
    assert sorted(p.name for p in venv.iterdir()) == ["bin"]  # nothing written into the environment


def test_every_subpackage_ships_in_a_built_wheel(tmp_path):
    """setup.py finds every package (a new patch folder needs no edit); patches/ ships as sglang_overlay.data."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("sglang_overlay-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    on_disk = {
        p.relative_to(REPO).as_posix()
        for root in ("sglang_overlay", "sglang_overlay_gsm8k")
        for p in (REPO / root).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert on_disk <= names, sorted(on_disk - names)
    data = {
        f"sglang_overlay/data/{p.relative_to(REPO / 'patches').as_posix()}"
        for p in (REPO / "patches").rglob("*")
        if p.is_file() and (p.name in ("upstream.lock", "default") or p.suffix == ".md")
    }
    assert data and data <= names, sorted(data - names)
    assert "sglang_overlay/data/pins/default" in names and "sglang_overlay_process_start.pth" in names


def test_rebase_check_of_a_file_that_is_not_a_wheel_is_a_clear_error(tmp_path):
    """Bad input: a clear error and exit 2, never a traceback (it was zipfile.BadZipFile)."""
    bogus = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    bogus.write_text("not a zip archive\n")
    proc = run_cli("rebase-check", "--wheel", str(bogus))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"{bogus} is not a wheel" in proc.stderr, proc.stderr[-2000:]
