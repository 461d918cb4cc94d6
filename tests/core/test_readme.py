"""The generated tables of the README and the docs are the registry's (``scripts/readme_tables.py``), in-process.

The "still needed" column runs upstream's probes (CI's lint runs them: ``readme_tables.py --check``); here the
committed verdicts are fed back, so every other cell of every block is checked without importing upstream.
"""

from __future__ import annotations

import importlib.util

import pytest

from sglang_overlay.core import lockfile
from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches
from tests.support.env import REPO


def _tables():
    spec = importlib.util.spec_from_file_location("readme_tables", REPO / "scripts" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_block_is_current():
    tables = _tables()
    needed = tables.current_needed((REPO / "README.md").read_text(encoding="utf-8"))
    stale = [page.relative_to(REPO) for page, (old, new) in tables.rendered(needed).items() if old != new]
    assert not stale, f"{stale}: python scripts/readme_tables.py --write"


def test_every_patch_has_a_verdict_and_every_knob_and_release_folder_a_row():
    tables = _tables()
    patches = discover_patches(ANY_UPSTREAM)
    needed = tables.current_needed((REPO / "README.md").read_text(encoding="utf-8"))
    assert set(needed) == {p.id for p in patches}
    assert set(needed.values()) <= {*tables.NEEDED_CELL.values(), "cannot tell"}
    readme = "\n".join(tables.patches_readme(patches, needed))
    knobs = "\n".join(tables.knobs(patches, needed))
    releases = "\n".join(tables.releases(patches, needed))
    for patch in patches:
        assert f"| {patch.position} | `{patch.id}` | {patch.title} | {patch.process} | {needed[patch.id]} |" in readme
        assert all(f"`{knob.name}`" in knobs for knob in patch.knobs)
        assert all(f"/{r.folder}/` | `{r.upstream}` |" in releases for r in patch.releases)


def test_each_sglang_range_is_one_line_naming_its_folders_and_the_pins_it_serves():
    tables = _tables()
    patches = discover_patches(ANY_UPSTREAM)
    lines = tables.release_ranges(patches, {})[2:]
    specs = {r.upstream for p in patches for r in p.releases}
    assert len(lines) == len(specs)
    for patch in patches:
        for r in patch.releases:
            (line,) = [line for line in lines if f"| `{r.upstream}` |" in line]
            pins = [v for v in lockfile.pin_dirs() if r.applies_to(v)]
            assert f"`{r.folder}/` ({patch.id})" in line and line.endswith(f"| {', '.join(pins) or 'none'} |"), line


def test_a_page_without_its_block_is_named():
    with pytest.raises(ValueError, match="knobs"):
        _tables().with_block("no markers here", "knobs", [])
