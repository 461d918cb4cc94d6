"""The "still needed?" probe of cp-hicache-owner-lanes on sglang <0.5.23: HiCache's bare alloc() on the lanes.

Runs the installed pin's probe through the registry, as ``check --needed`` does. Invariant: upstream's own
allocator and ``HiCacheController.load``, no overlay. Cost: about 10 s (importing upstream's controller).
"""

from __future__ import annotations

from sglang_overlay.core.installed import installed_sglang_version
from sglang_overlay.core.needed import run_probe
from sglang_overlay.core.registry import NEEDED, discover_patches


def test_upstreams_load_asks_a_bare_alloc_that_the_page_interleaved_allocator_refuses_with_room_in_every_lane():
    patch = next(p for p in discover_patches(installed_sglang_version()) if p.id == "cp-hicache-owner-lanes")
    found, _ = run_probe(patch.probe)
    assert found.verdict == NEEDED, found
    assert "load of a 12-token host prefix calls PageInterleavePoolAllocator.alloc, which raises" in found.evidence
    assert "NotImplementedError although lane free pages are [6, 6, 6, 6] (available_size() 96)" in found.evidence
