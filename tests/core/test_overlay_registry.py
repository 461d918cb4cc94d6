"""The shipped series as declared: every patch has its description, in the fork's trailer style."""

from __future__ import annotations

import re

import pytest

from sglang_overlay.core import lockfile
from sglang_overlay.core.registry import Knob, Patch, RegistryError, Target, discover_patches, package_name
from tests.conftest import REPO

SERIES = [p for p in discover_patches() if not p.extra]
TRAILERS = ("Constraint", "Rejected", "Directive", "Confidence", "Scope-risk", "Tested", "Not-tested")


def test_every_patch_folder_is_declared_in_series_order():
    """The series is exactly the folders under sglang_overlay/patches/, ordered by declared position."""
    folders = {p.parent.name for p in (REPO / "sglang_overlay" / "patches").glob("*/__init__.py")}
    assert {package_name(p.id) for p in SERIES} == folders
    assert [p.position for p in SERIES] == sorted(p.position for p in SERIES)
    assert len({p.position for p in SERIES}) == len(SERIES)
    series = lockfile.default_lock_path().parent / "series"  # the installed pin's (patches/ for the default)
    assert series.read_text().split() == [f"{p.position:04d}-{p.id}.patch" for p in SERIES]


@pytest.mark.parametrize("patch", SERIES, ids=lambda p: p.id)
def test_each_patch_has_its_tests_folder(patch):
    assert list((REPO / "tests" / "patches" / package_name(patch.id)).glob("test_*.py")), patch.id


@pytest.mark.parametrize("patch", SERIES, ids=lambda p: p.id)
def test_description_has_sections_and_trailers(patch):
    text = (REPO / "patches" / patch.description).read_text()
    for section in ("## Why", "## How", "## When it can be dropped"):
        assert section in text, f"{patch.description} lacks {section}"
    for trailer in TRAILERS:
        assert re.search(rf"^{trailer}: \S", text, re.M), f"{patch.description} lacks a {trailer}: trailer"
    dropped = text.split("## When it can be dropped", 1)[1].split("\n## ", 1)[0]
    assert dropped.strip(), f"{patch.description}: 'When it can be dropped' is empty"  # the one place it is said


@pytest.mark.parametrize("patch", SERIES, ids=lambda p: p.id)
def test_every_target_is_locked_and_its_hook_resolves(patch):
    lock = lockfile.read_lock()
    for target in patch.targets:
        entry = lock["targets"][target.path]
        assert entry["patch"] == patch.id and entry["hook_type"] == target.hook_type
        assert callable(target.resolve_hook())


def test_declarations_are_validated():
    with pytest.raises(RegistryError, match="lower-case"):
        Patch(id="Bad_Id", title="t", description="d", role="any", targets=(Target("m", "f", "a:b"),))
    with pytest.raises(RegistryError, match="role"):
        Patch(id="ok", title="t", description="d", role="gpu", targets=(Target("m", "f", "a:b"),))
    with pytest.raises(RegistryError, match="no targets"):
        Patch(id="ok", title="t", description="d", role="any", targets=())
    with pytest.raises(RegistryError, match="hook_type"):
        Target("m", "f", "a:b", hook_type="INSTEAD")
    with pytest.raises(RegistryError, match="module:function"):
        Target("m", "f", "a.b")
    with pytest.raises(RegistryError, match="version specifier"):
        Target("m", "f", "a:b", upstream="0.5.23 or later")
    with pytest.raises(RegistryError, match="position"):
        Patch(id="ok", title="t", description="d", role="any", targets=(Target("m", "f", "a:b"),), position=-1)
    with pytest.raises(RegistryError, match="SGLANG_OVERLAY_"):
        Knob("MY_VAR", "1", "m")
    with pytest.raises(ValueError, match="expected one of"):
        Knob("SGLANG_OVERLAY_X", "maybe", "m")


def test_targets_apply_per_upstream_release():
    """Room for per-release implementations: a target scoped to releases drops out of other releases' series."""
    both = Target("m", "A.f", "p.v20:h", upstream="<0.5.21")
    later = Target("m", "A.f", "p.v23:h", upstream=">=0.5.23")
    patch = Patch(id="ok", title="t", description="d", role="any", targets=(both, later), position=9)
    assert patch.for_upstream("0.5.20").targets == (both,)
    assert patch.for_upstream("0.5.23").targets == (later,)
    assert patch.for_upstream(None).targets == (both, later)


def test_a_knob_is_validated_when_read():
    knob = Knob("SGLANG_OVERLAY_X", "5", "m", kind="number", minimum=0)
    assert knob.read({}) == 5.0 and knob.read({"SGLANG_OVERLAY_X": " 7 "}) == 7.0
    with pytest.raises(ValueError, match="SGLANG_OVERLAY_X='-1': must be >= 0"):
        knob.read({"SGLANG_OVERLAY_X": "-1"})
    with pytest.raises(ValueError, match="expected a number"):
        knob.read({"SGLANG_OVERLAY_X": "fast"})
