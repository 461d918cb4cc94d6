"""Supported pins: one folder per upstream release (its lock), chosen by the installed sglang;
``patches/pins/default`` names the default in one line.

Pin-independent (runs under any installed sglang): reads the committed locks and the registry, never
imports upstream. A release's own behaviour is tested in its release folder (``tests/patches/<patch>/<folder>/``).
One pin is supported today; a second one (``SYNTHETIC``, in a copy of ``patches/``) shows what one more folder does.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from packaging.version import Version

from sglang_overlay.core import installed, lockfile, verify
from sglang_overlay.core.registry import ANY_UPSTREAM, Patch, Release, Target, discover_patches
from tests.support.env import REPO

# What the folders say, read here without the code under test: each folder with a lock, oldest first.
PINS = {p.name: p for p in sorted((REPO / "patches" / "pins").glob("*/upstream.lock"), key=lambda f: Version(f.parent.name))
        for p in [p.parent]}  # fmt: skip
DEFAULT = (REPO / "patches" / "pins" / "default").read_text(encoding="utf-8").strip()
SYNTHETIC = "0.5.22"  # a second pin, only ever in a copy of patches/ (synthetic_pins)


def synthetic_pins(root):
    """A copy of ``patches/`` under ``root`` with one more pin folder, ``SYNTHETIC``: the default's lock with the
    version, the wheels' names and torch changed (a pin is its folder and its lock, nothing else)."""
    import shutil

    copy = root / "patches"
    shutil.copytree(REPO / "patches", copy)
    lock = json.loads((copy / "pins" / DEFAULT / "upstream.lock").read_text(encoding="utf-8"))
    lock["upstream"].update(version=SYNTHETIC, torch="2.13.0", torchvision="0.28.0")
    for entry in lock["upstream"]["wheels"].values():
        entry["file"] = entry["file"].replace(f"sglang-{DEFAULT}-", f"sglang-{SYNTHETIC}-")
    (copy / "pins" / SYNTHETIC).mkdir()
    (copy / "pins" / SYNTHETIC / "upstream.lock").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    return copy


def test_the_supported_pins_are_the_folders_and_the_default_is_one_line():
    assert lockfile.pin_dirs() == PINS and list(lockfile.pin_dirs()) == list(PINS)  # oldest first
    assert DEFAULT in PINS
    assert lockfile.pin_dir("0.5.99") == REPO / "patches/pins/0.5.99"
    assert (REPO / "patches/pins/default").read_text() == DEFAULT + "\n" and lockfile.default_version() == DEFAULT


def test_changing_the_default_is_one_line(tmp_path, monkeypatch):
    """A copy of patches/ with a second pin whose default file names it: that pin becomes the default everywhere."""
    copy = synthetic_pins(tmp_path)
    (copy / "pins" / "default").write_text(f"{SYNTHETIC}\n")
    monkeypatch.setattr(lockfile, "patches_dir", lambda: copy)
    monkeypatch.setattr(installed, "installed_sglang_version", lambda: None)
    assert lockfile.default_version() == SYNTHETIC
    assert lockfile.default_lock_path() == copy / "pins" / SYNTHETIC / "upstream.lock"


@pytest.mark.parametrize("version, lock", [(SYNTHETIC, SYNTHETIC), (DEFAULT, DEFAULT), ("0.5.21", DEFAULT)])
def test_a_second_pin_folder_is_chosen_by_the_installed_sglang_and_another_release_refused(
    tmp_path, monkeypatch, version, lock
):
    copy = synthetic_pins(tmp_path)
    monkeypatch.setattr(lockfile, "patches_dir", lambda: copy)
    monkeypatch.setattr(installed, "installed_sglang_version", lambda: version)
    assert list(lockfile.pin_dirs()) == sorted([DEFAULT, SYNTHETIC], key=Version)  # oldest first
    assert lockfile.default_lock_path() == copy / "pins" / lock / "upstream.lock"
    problem = installed.version_problem(lockfile.read_pin().version, list(lockfile.pin_dirs()))
    if version == lock:
        assert problem is None
    else:
        assert f"does not support the installed sglang {version}" in problem
        assert f"supported pins: sglang=={SYNTHETIC}, sglang=={DEFAULT}" in problem


@pytest.mark.parametrize("version, lock", [*((v, v) for v in PINS), ("0.5.99", DEFAULT), (None, DEFAULT)])
def test_the_lock_is_the_installed_releases_else_the_default(monkeypatch, version, lock):
    monkeypatch.setattr(installed, "installed_sglang_version", lambda: version)
    assert lockfile.default_lock_path() == PINS[lock] / "upstream.lock"
    assert lockfile.read_pin().version == lock


def test_another_release_is_refused_naming_it_and_every_supported_pin(monkeypatch):
    monkeypatch.setattr(installed, "installed_sglang_version", lambda: "0.5.22")
    message = installed.version_problem(lockfile.read_pin().version, list(lockfile.pin_dirs()))
    assert "does not support the installed sglang 0.5.22" in message
    assert "supported pins: " + ", ".join(f"sglang=={v}" for v in PINS) in message


@pytest.mark.parametrize("pin", sorted(PINS))
def test_each_pins_lock_records_a_wheel_and_its_sha256_for_each_python(pin):
    """sglang ships one wheel per CPython tag (Rust extensions): the lock has each, named for its tag."""
    wheels = lockfile.read_pin(PINS[pin] / "upstream.lock").wheels
    assert {"3.11", "3.12"} <= set(wheels), wheels
    for python, entry in wheels.items():
        tag = "cp" + python.replace(".", "")
        assert entry["file"] == f"sglang-{pin}-{tag}-{tag}-manylinux_2_34_x86_64.whl", entry
        assert len(entry["sha256"]) == 64 and int(entry["sha256"], 16) >= 0
    assert len({e["sha256"] for e in wheels.values()}) == len(wheels)


def test_requires_python_covers_exactly_the_pythons_every_pin_ships_a_wheel_for():
    import tomllib

    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"])
    shipped = set.intersection(*(set(lockfile.read_pin(d / "upstream.lock").wheels) for d in PINS.values()))
    for minor in range(8, 16):
        python = f"3.{minor}"
        assert spec.contains(python + ".0") == (python in shipped), (python, str(spec), shipped)


@pytest.mark.parametrize("pin", sorted(PINS))
def test_each_pins_lock_holds_exactly_the_targets_declared_for_it(pin):
    lock = json.loads((PINS[pin] / "upstream.lock").read_text())
    assert lock["upstream"]["version"] == pin
    declared = {t.path: (p.id, t.hook_type) for p in discover_patches(pin) if not p.extra for t in p.targets}
    assert {path: (e["patch"], e["hook_type"]) for path, e in lock["targets"].items()} == declared


def test_each_release_folder_serves_its_pins_and_no_other():
    """Every release folder's range holds at least one supported pin, and every pin is served by exactly one
    folder of each patch that has folders: a pin never runs two designs' hooks, nor none."""
    for patch in discover_patches(ANY_UPSTREAM):
        for release in patch.releases:
            assert any(release.applies_to(pin) for pin in PINS), (patch.id, release.folder, release.upstream)
        if patch.releases:
            for pin in PINS:
                assert sum(r.applies_to(pin) for r in patch.releases) == 1, (patch.id, pin)


def test_a_patch_without_a_target_for_a_release_is_not_in_its_series():
    old = Release("<0.5.23", targets=(Target("sglang.srt.x", "A.f", "pkg.only_old.legacy.m:f"),), folder="legacy")
    patch = Patch(id="only-old", title="t", description="d.md", process="any", position=9, releases=(old,))
    assert patch.for_upstream("0.5.23") is None
    assert [t.path for t in patch.for_upstream(SYNTHETIC).targets] == ["sglang.srt.x.A.f"]


def run_apply(*args, repo=REPO):
    return subprocess.run([str(repo / "scripts" / "apply_patches.sh"), *args], capture_output=True, text=True)


def test_apply_patches_reads_another_pins_folder(tmp_path):
    """The set-up script in a checkout with a second pin: ``--upstream`` reads that pin's folder, the default
    stays the default's, and an unsupported version is refused naming both."""
    import shutil

    synthetic_pins(tmp_path)
    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO / "scripts" / "apply_patches.sh", tmp_path / "scripts" / "apply_patches.sh")
    proc = run_apply("--upstream", SYNTHETIC, "--print-pin", repo=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"sglang=={SYNTHETIC} torch==2.13.0 torchvision==0.28.0 python 3."), proc.stdout
    assert f"wheel sglang-{SYNTHETIC}-cp3" in proc.stdout or "wheel none for Python" in proc.stdout, proc.stdout
    proc = run_apply("--print-pin", repo=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith(f"sglang=={DEFAULT} "), proc.stdout + proc.stderr
    proc = run_apply("--upstream", "0.5.21", "--print-pin", repo=tmp_path)
    assert proc.returncode == 1
    assert f"sglang==0.5.21 is not a supported pin (supported: {SYNTHETIC} {DEFAULT}" in proc.stderr, proc.stderr


def test_apply_patches_refuses_an_unsupported_pin_and_names_the_supported_ones():
    proc = run_apply("--upstream", "0.5.99", "--print-pin")
    assert proc.returncode == 1
    assert f"sglang==0.5.99 is not a supported pin (supported: {' '.join(PINS)}" in proc.stderr


def test_an_unsupported_release_is_not_fingerprinted(monkeypatch):
    """Another release's sources say nothing about the pinned fingerprints, and a broken install may not even
    be locatable (finding a dotted module imports its package): the plan stops at the version."""
    from sglang_overlay.core import fingerprint

    def never(*_):
        raise AssertionError("fingerprinted an unsupported release")

    monkeypatch.setattr(installed, "installed_sglang_version", lambda: "0.5.22")
    monkeypatch.setattr(fingerprint, "fingerprint_installed", never)
    monkeypatch.setattr(fingerprint, "installed_file_digest", never)
    plan = verify.make_plan()
    assert plan.statuses == {} and "does not support the installed sglang 0.5.22" in plan.version_problem


def test_a_dotted_module_whose_package_does_not_import_is_missing_not_a_traceback(monkeypatch):
    from sglang_overlay.core import fingerprint

    def broken(name, *a, **k):
        raise KeyError("sglang")  # what importlib raises when a parent package failed half-way

    monkeypatch.setattr(fingerprint, "_file_under_top_level", lambda *a: None)
    monkeypatch.setattr(fingerprint.importlib.util, "find_spec", broken)
    with pytest.raises(fingerprint.TargetNotFound, match="importing its package fails"):
        fingerprint.module_source_path("sglang.srt.managers.tokenizer_manager")


def test_check_is_not_ok_when_the_installed_sglang_does_not_import(monkeypatch):
    from sglang_overlay.cli import check as cli

    real = installed.importlib.import_module

    def import_module(name, *args):
        if name == installed.HOOK_REGISTRY:
            raise ModuleNotFoundError("No module named 'torch'")
        return real(name, *args)

    plan = verify.make_plan()
    monkeypatch.setattr(installed.importlib, "import_module", import_module)
    report = cli._check_report(plan, ["sglang-overlay"])
    assert report["ok"] is False and report["problems"] == []  # every target matches: only the import fails
    expected = (
        f"sglang {installed.installed_sglang_version()} is installed but does not import "
        "(sglang.srt.plugins.hook_registry: ModuleNotFoundError"
    )
    assert any(p.startswith(expected) for p in report["readiness"]), report["readiness"]
