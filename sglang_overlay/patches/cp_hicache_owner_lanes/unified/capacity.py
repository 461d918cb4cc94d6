"""Prefill and decode capacity eviction per owner lane on 0.5.23 (AROUND ``evict_to_free_tokens``).

Job: keep upstream's gate (``available_size() >= num_tokens``: ``k = ceil(num_tokens / (N * page))`` free
pages in every lane) and fill it per lane: a covering plan is evicted (same planner and leaf index as the
load-back gate); an uncovered plan, or a lane still short after it, hands the call to upstream's original.
Invariant: admission is upstream's in every case; only the page-interleaved Full allocator of a cache the
patch acts on is planned. Cost with no lane short: an ``isinstance``, a dict lookup, N lengths.
"""

from __future__ import annotations

from typing import Optional

from sglang_overlay.patches.cp_hicache_owner_lanes import counters as ctr
from sglang_overlay.patches.cp_hicache_owner_lanes.report import lane_report, logger
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.eviction import evict_planned
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import plan_lanes
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import LaneState, state_of
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.upstream import interleaved


def evict_to_free_tokens_hook(original, self, tree_cache, num_tokens, *args, **kwargs):
    """AROUND ``BaseTokenToKVPoolAllocator.evict_to_free_tokens(tree_cache, num_tokens)``."""
    state = _state(self, tree_cache)
    if state is None or args or kwargs:
        return original(self, tree_cache, num_tokens, *args, **kwargs)
    per_lane = -(-int(num_tokens) // (state.shard_size * state.page_size))  # pages in every lane
    free = self.class_free_page_counts()
    if min(free) >= per_lane:  # upstream's shortfall <= 0: nothing to do
        return None
    need = [per_lane] * state.shard_size
    plan = plan_lanes(tree_cache, state, need, free)
    counters = state.counters
    if not plan.covered:
        counters.record_capacity(planned=False)
        return original(self, tree_cache, num_tokens)
    counters.record_capacity(planned=True)
    evict_planned(tree_cache, plan.leaves)
    after = self.class_free_page_counts()
    freed = [a - b for a, b in zip(after, free)]
    counters.record_eviction(freed, len(plan.leaves))
    if min(after) >= per_lane:
        return None
    counters.record_warning(ctr.WARN_SHORT_EVICTION)
    logger.warning(
        "owner-lane capacity eviction: the planned eviction freed less than planned, upstream's eviction continues; %s",
        lane_report(planned=plan.pages_per_lane, freed=freed, need=need, free=after),
    )
    return original(self, tree_cache, num_tokens)


def _state(allocator, tree_cache) -> Optional[LaneState]:
    """The load-back hook's state when ``allocator`` is that cache's page-interleaved Full allocator."""
    if tree_cache is None or not isinstance(allocator, interleaved()):
        return None
    if not hasattr(tree_cache, "tree_core") or not tree_cache.supports_prefix_sharing():
        return None
    state = state_of(tree_cache)
    if state is None or state.allocator is not allocator:
        return None
    return state
