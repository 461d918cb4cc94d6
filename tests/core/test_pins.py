"""Supported pins: one lock and series per upstream release, chosen by the installed sglang.

Pin-independent (runs under any installed sglang): reads the committed locks and the registry,
never imports upstream. The pin's own behaviour is in ``tests/*/test_v0_5_23*.py``.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from sglang_overlay.core import lockfile, verify
from sglang_overlay.core.registry import ANY_UPSTREAM, Patch, Target, discover_patches
from tests.conftest import REPO

PINS = {"0.5.20": REPO / "patches", "0.5.23": REPO / "patches" / "pins" / "0.5.23"}


def test_the_supported_pins_are_the_default_and_each_pins_folder():
    assert lockfile.pin_dirs() == PINS
    assert lockfile.pin_dir("0.5.20") == PINS["0.5.20"] and lockfile.pin_dir("0.5.99") == REPO / "patches/pins/0.5.99"


@pytest.mark.parametrize("installed, lock", [("0.5.20", "0.5.20"), ("0.5.23", "0.5.23"), ("0.5.99", "0.5.20"),
                                             (None, "0.5.20")])  # fmt: skip
def test_the_lock_is_the_installed_releases_else_the_default(monkeypatch, installed, lock):
    monkeypatch.setattr(verify, "installed_sglang_version", lambda: installed)
    assert lockfile.default_lock_path() == PINS[lock] / "upstream.lock"
    assert lockfile.read_pin().version == lock


def test_another_release_is_refused_naming_every_supported_pin(monkeypatch):
    monkeypatch.setattr(verify, "installed_sglang_version", lambda: "0.5.99")
    message = verify.version_problem(lockfile.read_pin())
    assert "pinned to sglang==0.5.20, found 0.5.99" in message
    assert "supported pins: sglang==0.5.20, sglang==0.5.23" in message and "--upstream VERSION" in message


@pytest.mark.parametrize("pin", sorted(PINS))
def test_each_pins_lock_holds_exactly_the_targets_declared_for_it(pin):
    lock = json.loads((PINS[pin] / "upstream.lock").read_text())
    assert lock["upstream"]["version"] == pin
    declared = {t.path: (p.id, t.hook_type) for p in discover_patches(pin) if not p.extra for t in p.targets}
    assert {path: (e["patch"], e["hook_type"]) for path, e in lock["targets"].items()} == declared
    series = (PINS[pin] / "series").read_text().split()
    assert series == sorted(f"{p.position:04d}-{p.id}.patch" for p in discover_patches(pin) if not p.extra)
    assert all((PINS[pin] / name).is_file() for name in series)


def test_each_release_gets_its_own_implementation_of_a_hooked_method():
    """One upstream method, two hooks: 0.5.20's full branch, 0.5.23's normalize-then-upstream."""
    path = "sglang.srt.managers.tokenizer_manager.TokenizerManager._handle_abort_finish_reason"

    def hook(pin):
        return {t.path: t.hook for p in discover_patches(pin) for t in p.targets}[path]

    assert hook("0.5.20").endswith(":handle_abort_finish_reason")
    assert hook("0.5.23").endswith(":normalize_then_upstream")
    every = [t for p in discover_patches(ANY_UPSTREAM) for t in p.targets if t.path == path]
    assert sorted(t.upstream for t in every) == ["<0.5.23", ">=0.5.23"]


def test_discovery_defaults_to_the_pin_in_use(monkeypatch):
    monkeypatch.setattr(verify, "installed_sglang_version", lambda: "0.5.23")
    assert {t.path for p in discover_patches() for t in p.targets} == \
        {t.path for p in discover_patches("0.5.23") for t in p.targets}
    assert not any("HiRadixCache" in t.path for p in discover_patches() for t in p.targets)


def test_a_patch_without_a_target_for_a_release_is_not_in_its_series():
    patch = Patch(id="only-old", title="t", description="d.md", role="any", position=9,
                  targets=(Target("sglang.srt.x", "A.f", "m:f", upstream="<0.5.23"),))  # fmt: skip
    assert patch.for_upstream("0.5.23") is None
    assert patch.for_upstream("0.5.20") is patch


def run_apply(*args):
    return subprocess.run([str(REPO / "scripts" / "apply_patches.sh"), *args], capture_output=True, text=True)


def test_apply_patches_reads_the_second_pin():
    proc = run_apply("--upstream", "0.5.23", "--print-pin")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("sglang==0.5.23 torch==2.14.1 torchvision==0.29.1 python==3.11")


def test_apply_patches_refuses_an_unsupported_pin_and_names_the_supported_ones():
    proc = run_apply("--upstream", "0.5.99", "--print-pin")
    assert proc.returncode == 1
    assert "sglang==0.5.99 is not a supported pin (supported: 0.5.20 0.5.23" in proc.stderr
