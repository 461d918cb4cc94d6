"""The README's generated tables are the registry's (``scripts/readme_tables.py``), in-process."""

from __future__ import annotations

import importlib.util

from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches
from tests.support.env import REPO


def _tables():
    spec = importlib.util.spec_from_file_location("readme_tables", REPO / "scripts" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_tables_are_generated_from_the_registry():
    tables = _tables()
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert tables.with_block(text, discover_patches(ANY_UPSTREAM)) == text, "python scripts/readme_tables.py --write"


def test_every_patch_and_knob_has_a_row():
    block = _tables().block(discover_patches(ANY_UPSTREAM))
    for patch in discover_patches(ANY_UPSTREAM):
        assert f"| {patch.position} | `{patch.id}` | {patch.process} |" in block
        assert all(f"`{knob.name}`" in block for knob in patch.knobs)
