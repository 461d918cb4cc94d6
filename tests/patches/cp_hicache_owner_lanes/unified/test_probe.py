"""The "still needed?" probe of cp-hicache-owner-lanes on sglang >=0.5.23: upstream's three gates, lane-blind.

Runs the installed pin's probe through the registry, as ``check --needed`` does. Invariant: upstream's own
allocator, cache and gates, no overlay. Cost: about 10 s (importing upstream's unified radix cache).
"""

from __future__ import annotations

from sglang_overlay.core.installed import installed_sglang_version
from sglang_overlay.core.needed import run_probe
from sglang_overlay.core.registry import NEEDED, discover_patches


def test_upstreams_min_lane_gates_evict_all_28_tokens_and_refuse_a_backup_with_room():
    patch = next(p for p in discover_patches(installed_sglang_version()) if p.id == "cp-hicache-owner-lanes")
    found, _ = run_probe(patch.probe)
    assert found.verdict == NEEDED, found
    assert "min-lane available_size() = 0 with lane free pages [0, 4, 4, 4]" in found.evidence
    assert (
        "load_back of a 12-token host chain in lanes 1-3 evicted 28 tokens, then asked for the load" in found.evidence
    )
    assert "evict_to_free_tokens(16) evicted 28 tokens where the one 4-token lane-0 leaf covers it" in found.evidence
    assert "_execute_kv_backup of a chain in lanes 1-3 refused with host lane free pages [0, 6, 6, 6]" in found.evidence
