"""The shipped series as declared: every patch has its description, in the fork's trailer style."""

from __future__ import annotations

import re

import pytest

from sglang_overlay.core import lockfile
from sglang_overlay.core.registry import Patch, RegistryError, Target, discover_patches
from tests.conftest import REPO

SERIES = [p for p in discover_patches() if not p.extra]
TRAILERS = ("Constraint", "Rejected", "Directive", "Confidence", "Scope-risk", "Tested", "Not-tested")


def test_the_three_patches_are_declared():
    assert {p.id for p in SERIES} == {"cp-hicache-owner-lanes", "moe-cp-compaction", "openai-abort-status"}


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
