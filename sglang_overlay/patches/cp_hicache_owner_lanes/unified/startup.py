"""Start-up refusal on 0.5.23 (AFTER ``UnifiedRadixCache.__init__``): a page-interleaved cache the lanes cannot plan.

Job: when the cache's Full allocator is a ``PageInterleavePoolAllocator`` (the case the patch exists for) but
the planner cannot read the tree (:func:`.state.unplannable`: a tree core other than the Python
``UnifiedTreeCore``, or tree components beside FULL, i.e. hybrid Mamba / SWA device and host pools, whose
load-back, capacity and backup gates the patch does not plan per lane), refuse at construction naming the
cause and what to change, instead of leaving upstream's lane-blind gates in place at run time.
Invariant: a cache that is not page-interleaved, or is disabled, is never refused; a FULL-only Python tree
(what ``--enable-kv-cache-sharding`` builds) is never refused. Cost: one ``isinstance`` and a tuple
comparison per cache, at construction.
"""

from __future__ import annotations

from sglang_overlay.errors import OverlayError
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import unplannable

PATCH_ID = "cp-hicache-owner-lanes"


def refuse_unplannable_at_startup(result, self, *args, **kwargs):
    """AFTER ``UnifiedRadixCache.__init__(params)``.

    Raises:
        OverlayError: the page-interleaved cache is one the owner-lane planner cannot serve.
    """
    if self.disable:
        return None
    reason = unplannable(self)
    if reason is not None:
        raise OverlayError(
            f"patch '{PATCH_ID}' cannot plan owner-lane eviction on this page-interleaved UnifiedRadixCache: "
            f"{reason}. Serve this model without KV cache sharding (--enable-kv-cache-sharding) or disable "
            f"the patch (SGLANG_OVERLAY_DISABLE={PATCH_ID}); with the patch disabled upstream's lane-blind "
            "load-back, capacity and host-backup gates apply."
        )
    return None
