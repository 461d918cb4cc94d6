"""patches/README.md's "Moving to a new upstream release", walked on a locally built wheel.

The new release is made here, offline: the installed sglang (whichever pin this environment has)
repackaged as ``<version>.post1`` with one hooked target changed the way upstream changes code (one
statement appended to its body; nothing else differs). It is a real wheel (dist-info, RECORD with
hashes), installed by pip (``--no-deps --target``) into a second environment whose site-packages holds this
one's distributions (linked) except sglang, so every overlay command sees exactly what a user's environment
would after ``pip install sglang==NEW``: one sglang install record, ``importlib.metadata`` reports the new
version, ``import sglang`` loads the new code (the same release on ``PYTHONPATH`` over the old one would be two
sglang records, which ``check`` rightly refuses: ``core.installed``). A temporary copy of this checkout's tracked files plays the maintainer's
tree, so the real ``patches/`` is never written.

The walk, step by step as the document numbers them:
1. ``rebase-check --wheel`` names the changed target, and only it;
2. with the new release installed, ``check`` refuses the version and names the supported pins;
3. the port: the appended statement does not touch what the hook relies on, and the release folder's
   range already covers ``.post1``, so the implementation is kept (no file edited by hand);
4. ``lock --wheel`` writes ``patches/pins/<new>/upstream.lock`` (only the changed target's fingerprint
   differs from the old pin's);
5. ``check`` now passes; ``load_plugins()`` hooks every target of the new lock through HookRegistry;
6. ``lock --check`` holds, and the tree changed only under ``patches/pins/<new>/``.

What it does not walk: step 5's ``apply_patches.sh --upstream NEW`` (that downloads NEW's torch pair from
the registry; CI runs it for 0.5.23) and a port that needs new code (that is the maintainer's reading;
0.5.23's ports are the worked example). Cost: about a minute and ~200 MB of temporary disk (marker ci_slow).
"""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.checkout import changed, copy_checkout
from tests.support.env import subprocess_env
from tests.support.proc import HOOK_REPORT, hook_report

pytestmark = pytest.mark.ci_slow

APPENDED = "_sglang_overlay_rebase_walk = None"  # the "upstream change": one statement at the end of a body


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _changed_source(source: str, qualname: str) -> str:
    """``source`` with APPENDED as the last statement of ``qualname``'s body (same indentation as its body)."""
    from sglang_overlay.core.introspection import find_definition

    node = find_definition(ast.parse(source), qualname)
    lines = source.splitlines(keepends=True)
    indent = " " * node.body[0].col_offset
    lines.insert(node.end_lineno, f"{indent}{APPENDED}\n")
    return "".join(lines)


def build_wheel(package_dir: Path, version: str, new_version: str, edits: dict[str, str], out: Path) -> Path:
    """A wheel of ``package_dir`` as sglang ``new_version`` for this CPython (sglang ships one per tag);
    ``edits`` maps a path inside the package to its new text. The dist-info is the installed one's, with
    the version changed."""
    dist = importlib.metadata.distribution("sglang")
    info = f"sglang-{new_version}.dist-info"
    tag = "cp%d%d" % sys.version_info[:2]
    wheel = out / f"sglang-{new_version}-{tag}-{tag}-linux_x86_64.whl"
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:

        def add(name: str, data: bytes) -> None:
            zf.writestr(name, data)
            record.append(_record_line(name, data))

        for path in sorted(package_dir.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                rel = path.relative_to(package_dir).as_posix()
                data = edits[rel].encode() if rel in edits else path.read_bytes()
                add(f"sglang/{rel}", data)
        metadata = dist.read_text("METADATA").replace(f"\nVersion: {version}\n", f"\nVersion: {new_version}\n", 1)
        assert f"Version: {new_version}" in metadata
        add(f"{info}/METADATA", metadata.encode())
        add(
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: sglang-overlay-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        add(f"{info}/top_level.txt", b"sglang\n")
        zf.writestr(f"{info}/RECORD", "\n".join(record + [f"{info}/RECORD,,"]) + "\n")
    return wheel


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    return copy_checkout(tmp_path_factory.mktemp("clone") / "sglang-overlay")


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The new release: its wheel, the folder pip installed it to, its version, and the changed target."""
    import importlib.util

    from sglang_overlay.core import lockfile

    version = importlib.metadata.version("sglang")
    new_version = f"{version}.post1"
    lock = lockfile.read_lock()
    path, entry = next((p, e) for p, e in sorted(lock["targets"].items()) if "." in e["qualname"])
    package_dir = Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
    rel = entry["module"].removeprefix("sglang.").replace(".", "/") + ".py"
    assert (package_dir / rel).is_file(), rel
    edited = _changed_source((package_dir / rel).read_text(encoding="utf-8"), entry["qualname"])
    out = tmp_path_factory.mktemp("release")
    wheel = build_wheel(package_dir, version, new_version, {rel: edited}, out)
    site = _environment_without_sglang(out / "env")
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-compile",
            "--no-index",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    return dict(wheel=wheel, site=site, version=version, new=new_version, target=path, old_lock=lock)


def overlay(root: Path, *args: str, site: Path | None = None, code: str | None = None) -> subprocess.CompletedProcess:
    """The copy's overlay in a fresh interpreter; with ``site``, the new release installed first on the path."""
    env = subprocess_env()
    env["PYTHONPATH"] = str(root)
    python = _python_of(site) if site else sys.executable
    command = ["-c", code] if code else ["-m", "sglang_overlay", *args]
    return subprocess.run([python, *command], cwd=root, env=env, capture_output=True, text=True, timeout=600)


def _python_of(site: Path) -> str:
    """The interpreter of the environment whose site-packages is ``site`` (``ENV/lib/pythonX.Y/site-packages``)."""
    return str(site.parents[2] / "bin" / "python")


def _environment_without_sglang(root: Path) -> Path:
    """A new environment at ``root`` whose site-packages links every distribution of this one except sglang."""
    made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-3000:]
    (site,) = root.glob("lib/python*/site-packages")
    here = Path(importlib.metadata.distribution("sglang").locate_file(""))
    for entry in here.iterdir():
        if entry.name != "sglang" and not entry.name.startswith(("sglang-", "__pycache__")):
            (site / entry.name).symlink_to(entry)
    return site


def test_the_release_is_what_users_would_install(copy, release):
    proc = overlay(
        copy,
        site=release["site"],
        code="import importlib.metadata, sglang; print(importlib.metadata.version('sglang'), sglang.__file__)",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    version, origin = proc.stdout.split()
    assert version == release["new"] and origin.startswith(str(release["site"]))


def test_step1_rebase_check_names_the_changed_target_only(copy, release):
    proc = overlay(copy, "rebase-check", "--wheel", str(release["wheel"]), "--json")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(proc.stdout)["targets"]
    moved = {r["target"]: r["status"] for r in rows if r["status"] != "match"}
    assert moved == {release["target"]: "drift"}
    assert {r["target"] for r in rows} == set(release["old_lock"]["targets"])


def test_step2_the_new_release_is_refused_until_it_is_pinned(copy, release):
    proc = overlay(copy, "check", "--json", site=release["site"])
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert f"installed sglang {release['new']}" in text and "supported pins: " in text, text[-3000:]
    assert release["version"] in text.split("supported pins: ", 1)[1], text[-3000:]


def test_steps3_to_6_lock_check_hook(copy, release):
    from sglang_overlay.core import lockfile

    new, site = release["new"], release["site"]
    before = changed(copy)
    locked = overlay(copy, "lock", "--wheel", str(release["wheel"]), site=site)
    assert locked.returncode == 0, locked.stdout + locked.stderr
    pin = copy / "patches" / "pins" / new
    data = lockfile.read_lock(pin / lockfile.LOCK_NAME)
    old = release["old_lock"]
    python = "%d.%d" % sys.version_info[:2]
    assert data["upstream"]["version"] == new
    assert data["upstream"]["wheels"] == {
        python: {"file": release["wheel"].name, "sha256": lockfile.sha256_file(release["wheel"])}
    }
    assert set(data["targets"]) == set(old["targets"])
    differing = {p for p in old["targets"] if data["targets"][p]["fingerprint"] != old["targets"][p]["fingerprint"]}
    assert differing == {release["target"]}

    check = overlay(copy, "check", "--json", site=site)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    rows = json.loads(check.stdout)["targets"]
    assert rows and {r["fingerprint"] for r in rows} == {"match"}

    report = hook_report(overlay(copy, site=site, code=HOOK_REPORT))
    assert report["lock"] == str(pin / lockfile.LOCK_NAME)
    assert report["wrapped"] and all(report["wrapped"].values()), report["wrapped"]
    applied = {p for paths in report["status"]["applied"].values() for p in paths}
    assert applied == set(data["targets"])

    proc = overlay(copy, "lock", "--check", site=site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    made = changed(copy) - before
    assert made == {f"patches/pins/{new}/upstream.lock"}, made
