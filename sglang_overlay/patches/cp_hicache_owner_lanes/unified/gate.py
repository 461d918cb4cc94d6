"""The 0.5.23 load-back admission gate per owner lane (AROUND ``UnifiedRadixCache._load_back_transfers``).

Job: for one call, upstream's ``_component_available_size`` (FULL) and ``evict_for_alloc`` are shadowed on
the instance (:func:`.shadow.shadowed`): the first FULL query plans, evicts a covering plan and reports room
for the load; an uncovered plan evicts nothing and upstream's refusal path runs. Invariant: nothing evicted unless every deficit is
covered; the shadows are removed even when the call raises. Cost: one walk to the root and N free counts
when no lane is short; otherwise the planner's scan and the evictions.
"""

from __future__ import annotations

import time
from typing import Optional

from sglang_overlay.patches.cp_hicache_owner_lanes import counters as ctr
from sglang_overlay.patches.cp_hicache_owner_lanes.report import lane_report, logger
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.eviction import evict_planned
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import plan_load_back
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.shadow import shadowed
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import LaneState, state_of
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.upstream import full as _full


def load_back_transfers_hook(original, self, *args, **kwargs):
    """AROUND ``UnifiedRadixCache._load_back_transfers`` (keyword-only upstream)."""
    state = state_of(self)
    if state is None:
        return original(self, *args, **kwargs)
    gate = LaneGate(self, state, kwargs["node_id"])
    with shadowed(self, _component_available_size=gate.available, evict_for_alloc=gate.evict_for_alloc):
        loaded = original(self, *args, **kwargs)
    gate.account(loaded)
    return loaded


class LaneGate:
    """Upstream's load-back admission gate, per owner lane, for one call.

    Its :meth:`available` and :meth:`evict_for_alloc` shadow upstream's
    ``_component_available_size`` and ``evict_for_alloc`` on the instance around the
    original ``_load_back_transfers``. The first Full availability query decides (plan, evict the plan if it covers
    every deficit); afterwards Full availability is at least the load's tokens when
    admitted, upstream's own value when refused, and ``evict_for_alloc`` is empty,
    so upstream's lane-blind eviction never runs in this call after the decision.
    """

    def __init__(self, cache, state: LaneState, node_id):
        self.cache = cache
        self.state = state
        self.node_id = node_id
        self.admitted: Optional[int] = None  # tokens: None undecided, 0 refused, else the load's tokens
        # What the shadows stand in for, read before they are installed.
        self._available = cache._component_available_size
        self._evict_for_alloc = cache.evict_for_alloc

    def available(self, component_type):
        real = self._available(component_type)
        if component_type != _full():
            return real
        if self.admitted is None:
            self.admitted = self._decide()
        return max(real, self.admitted)

    def evict_for_alloc(self, params, **kwargs):
        if self.admitted is None:
            return self._evict_for_alloc(params, **kwargs)
        from sglang.srt.mem_cache.base_prefix_cache import EvictResult

        return EvictResult()

    def _decide(self) -> int:
        """Plan; evict a covering plan; the tokens admitted, or 0 (refused, nothing evicted)."""
        state = self.state
        t0 = time.perf_counter()
        tokens, need, free, plan = plan_load_back(self.cache, state, self.node_id)
        self._count_plan(plan, need, free, (time.perf_counter() - t0) * 1e3)
        if not plan.covered:
            state.counters.record_warning(ctr.WARN_REFUSED)
            logger.debug(
                "owner-lane load-back: node %d refused, nothing evicted; %s",
                self.node_id,
                lane_report(need=need, free=free, uncovered=plan.remaining),
            )
            return 0
        if not plan.leaves:
            return tokens
        evict_planned(self.cache, plan.leaves)
        after = state.allocator.class_free_page_counts()
        freed = [a - b for a, b in zip(after, free)]
        state.counters.record_eviction(freed, len(plan.leaves))
        still_short = any(a < x for a, x in zip(after, need))
        if still_short or any(f < p for f, p in zip(freed, plan.pages_per_lane)):
            state.counters.record_warning(ctr.WARN_SHORT_EVICTION)
            logger.warning(
                "owner-lane load-back: node %d, the planned eviction freed less than planned%s; %s",
                self.node_id,
                " (load refused)" if still_short else "",
                lane_report(planned=plan.pages_per_lane, freed=freed, need=need, free=after),
            )
        return 0 if still_short else tokens

    def _count_plan(self, plan, need, free, plan_ms: float) -> None:
        limit = self.state.slow_plan_ms
        if self.state.counters.record_plan(plan, plan_ms, limit):
            logger.warning(
                "owner-lane load-back: node %d, planning took %.2f ms > %.2f ms (%d nodes scanned); %s",
                self.node_id,
                plan_ms,
                limit,
                plan.scanned,
                lane_report(need=need, free=free, deficit=plan.deficit),
            )

    def account(self, loaded: bool) -> None:
        """Count the outcome of a call the gate decided (upstream may refuse before the gate)."""
        if self.admitted is None:
            return
        self.state.counters.record_outcome(bool(loaded))
        if self.admitted and not loaded:
            self.state.counters.record_warning(ctr.WARN_SHORT_EVICTION)
            logger.warning(
                "owner-lane load-back: node %d admitted per lane but upstream's load failed; %s",
                self.node_id,
                lane_report(free=self.state.allocator.class_free_page_counts()),
            )
