"""The "still needed?" probe of moe-cp-compaction on the installed pin's real top-k padding mask."""

from __future__ import annotations

from sglang_overlay.core.installed import installed_sglang_version
from sglang_overlay.core.needed import run_probe
from sglang_overlay.core.registry import NEEDED, discover_patches


def test_upstreams_suffix_mask_drops_a_valid_lane_slot_row_and_admits_a_dummy_one():
    patch = next(p for p in discover_patches(installed_sglang_version()) if p.id == "moe-cp-compaction")
    found, _ = run_probe(patch.probe)
    assert found.verdict == NEEDED, found
    assert "valid rows [0, 1, 3, 4]) it drops valid rows [4] and lets dummy rows [2] reach top-k" in found.evidence
