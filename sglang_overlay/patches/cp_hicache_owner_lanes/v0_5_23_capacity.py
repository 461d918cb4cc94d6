"""cp-hicache-owner-lanes on sglang 0.5.23: prefill and decode capacity eviction per owner lane.

Model. Before every paged extend and decode allocation (and after a decode retraction)
upstream calls ``allocator.evict_to_free_tokens(tree_cache, num_tokens)``. On a
``PageInterleavePoolAllocator`` its gate is ``available_size() >= num_tokens``, i.e.
every lane holds at least ``k = ceil(num_tokens / (N * page_size))`` free pages, and
it fills a shortfall with lane-blind LRU (``evict_for_alloc``, then
``_evict_until_allocatable`` one page at a time): it frees pages of lanes that are
not short until the tightest lane rises.

What this hook does (AROUND ``BaseTokenToKVPoolAllocator.evict_to_free_tokens``),
only when the allocator is the page-interleaved Full allocator of a cache on which
the load-back hook acts (:func:`.v0_5_23.state_of`); any other allocator or cache,
or ``num_tokens`` with no lane short, gets the original unchanged:

1. need per lane = ``k`` (upstream's own gate, so admission is decided exactly as
   upstream decides it); free per lane = ``class_free_page_counts()``;
2. plans with the patch's planner over the same leaf index as the load-back hook
   (:func:`.v0_5_23.plan_lanes`): only units holding a page of a short lane, in
   upstream's eviction order, child-then-parent chains included;
3. a covering plan is evicted through upstream's primitives
   (:func:`.v0_5_23.evict_planned`); if a lane is still short afterwards (a bug or an
   upstream accounting change: warned, counted) upstream's original finishes the job;
4. a plan that does not cover hands the call to upstream's original untouched. The
   planner cannot see a node without a rotation base, so "uncovered" is not a proof
   that eviction cannot help, and refusing would retract or stall a request that
   upstream admits.

Invariants: the gate's outcome (``available_size() >= num_tokens`` after the call) is
upstream's in every case; on a covered deficit only units holding a short-lane page
are evicted, a subset of what upstream's walk in the same order evicts; planning reads
Python attributes and tensor lengths only (no host-device sync).

Cost: when no lane is short (every decode step with room): an ``isinstance``, one
dict lookup and N ``len()`` of the per-lane free tensors. Otherwise the planner's
cost (nodes scanned, each O(log scanned)) and the evictions. Logging: nothing per
call; one warning when an executed plan freed less than planned. Counted in
:func:`.counters.counters_of` as ``capacity_plans`` (plans executed) and
``capacity_fallbacks`` (uncovered plans handed to upstream).

Usage (the declaration)::

    Target("sglang.srt.mem_cache.allocator.base", "BaseTokenToKVPoolAllocator.evict_to_free_tokens",
           "sglang_overlay.patches.cp_hicache_owner_lanes.v0_5_23_capacity:evict_to_free_tokens_hook",
           "AROUND", upstream=">=0.5.23")

Exit condition: drop when upstream's ``evict_to_free_tokens`` (or ``_evict_until_allocatable``)
chooses victims per owner lane.
"""

from __future__ import annotations

import logging
from typing import Optional

from sglang_overlay.patches.cp_hicache_owner_lanes import counters as ctr
from sglang_overlay.patches.cp_hicache_owner_lanes import v0_5_23 as v23

logger = v23.logger
_INTERLEAVED: Optional[type] = None


def _interleaved() -> type:
    """Upstream's ``PageInterleavePoolAllocator``, imported on first use (no upstream import at load)."""
    global _INTERLEAVED
    if _INTERLEAVED is None:
        from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

        _INTERLEAVED = PageInterleavePoolAllocator
    return _INTERLEAVED


def evict_to_free_tokens_hook(original, self, tree_cache, num_tokens, *args, **kwargs):
    """AROUND ``BaseTokenToKVPoolAllocator.evict_to_free_tokens(tree_cache, num_tokens)``."""
    state = _state(self, tree_cache)
    if state is None or args or kwargs:
        return original(self, tree_cache, num_tokens, *args, **kwargs)
    per_lane = -(-int(num_tokens) // (state.shard_size * state.page_size))
    free = self.class_free_page_counts()
    if min(free) >= per_lane:  # upstream's shortfall <= 0: nothing to do
        return None
    need = [per_lane] * state.shard_size
    plan = v23.plan_lanes(tree_cache, state, need, free)
    counters = state.counters
    if not plan.covered:
        counters.record_capacity(planned=False)
        return original(self, tree_cache, num_tokens)
    counters.record_capacity(planned=True)
    v23.evict_planned(tree_cache, [view.node for view in plan.leaves])
    after = self.class_free_page_counts()
    freed = [a - b for a, b in zip(after, free)]
    counters.record_eviction(freed, len(plan.leaves))
    if min(after) >= per_lane:
        return None
    counters.record_warning(ctr.WARN_SHORT_EVICTION)
    logger.warning("owner-lane capacity eviction: the planned eviction freed less than planned, upstream's "
                   "eviction continues; %s", v23.lane_report(planned=plan.pages_per_lane, freed=freed,
                                                              need=need, free=after))
    return original(self, tree_cache, num_tokens)


def _state(allocator, tree_cache) -> Optional["v23.LaneState"]:
    """The load-back hook's state when ``allocator`` is that cache's page-interleaved Full allocator."""
    if tree_cache is None or not isinstance(allocator, _interleaved()):
        return None
    if not hasattr(tree_cache, "tree_core") or not tree_cache.supports_prefix_sharing():
        return None
    state = v23.state_of(tree_cache)
    if state is None or state.allocator is not allocator:
        return None
    return state
