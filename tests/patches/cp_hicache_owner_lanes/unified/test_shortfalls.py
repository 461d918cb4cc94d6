"""cp-hicache-owner-lanes on sglang 0.5.23: what the load-back gate and the capacity hook do and say when
their planned eviction frees less than planned, and when upstream's load fails after the gate admitted it.

On upstream's real UnifiedRadixCache, HybridCacheController and PageInterleavePoolAllocator (CPU;
stand-ins named in this folder's hicache_cpu.py). A victim "locked since planning" is produced by
upstream's own ``inc_lock_ref`` between the plan and the eviction (the one seam: the hook module's
``evict_planned`` name, wrapped); a load that fails after admission by the controller's ``load``
answering None (STAND-IN for a failed device draw, which one CPU process cannot make after the gate). Every claim here is an operator's:
the load or the capacity call ends as upstream's would, and the warning names the node and the lanes.
"""

from __future__ import annotations

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes.counters import WARN_SHORT_EVICTION, counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.report import logger
from sglang_overlay.patches.cp_hicache_owner_lanes.unified import capacity as cap
from sglang_overlay.patches.cp_hicache_owner_lanes.unified import gate
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.eviction import evict_planned
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.support.hooked import around


@pytest.fixture(scope="module", autouse=True)
def hooks():
    from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    with around(UnifiedRadixCache, "_load_back_transfers", gate.load_back_transfers_hook, "cp-hicache-owner-lanes"):
        with around(
            BaseTokenToKVPoolAllocator, "evict_to_free_tokens", cap.evict_to_free_tokens_hook, "cp-hicache-owner-lanes"
        ):
            yield


def hold_all_but(h, keep):
    """Running requests take every free page of each lane but ``keep[lane]``; returns the held
    position of one page of each lane (for ``h.release``)."""
    first = {}
    for lane, pages in enumerate(h.alloc.class_free_page_counts()):
        if pages - keep[lane] > 0:
            first[lane] = len(h.held)
        h.hold(lane, pages - keep[lane])
    return first


def two_lanes_short():
    """The load needs one page per lane; lanes 2 and 3 are drained, one evictable leaf each (planned
    in that order: the lane-2 leaf is the older), and evictable leaves of lanes 0 and 1."""
    h = Harness()
    keys, _ = h.chain(0, 4)
    node = h.to_host(keys)
    for lane in (2, 3, 0, 1):
        h.chain(lane, 1)
    hold_all_but(h, [1, 1, 0, 0])
    return h, node


def over_covered():
    """The load needs one page per lane; lane 2 is drained and its one evictable page sits in a
    two-page leaf (lanes 2 and 3), so the plan frees a lane-3 page the load does not need."""
    h = Harness()
    keys, _ = h.chain(0, 4)
    node = h.to_host(keys)
    h.chain(2, 2)
    h.chain(0, 1)
    first = hold_all_but(h, [1, 1, 0, 1])
    return h, node, first[2]


@pytest.fixture
def lock_first_victim(monkeypatch):
    """Wrap the hook modules' ``evict_planned``: lock the first planned victim with upstream's
    ``inc_lock_ref`` (it leaves the evictable leaves), run ``between()``, then evict as planned."""
    planned = []

    def arm(module, between=lambda: None):
        def locking(cache, nodes):
            planned.append([x.id for x in nodes])
            cache.inc_lock_ref(nodes[0].id)
            between()
            return evict_planned(cache, nodes)

        monkeypatch.setattr(module, "evict_planned", locking)
        return planned

    return arm


def warnings_of(caplog):
    """The patch's own warnings (upstream's start-up warnings left out)."""
    return [r.getMessage() for r in caplog.records if r.name == logger.name and r.levelname == "WARNING"]


def test_a_victim_locked_since_planning_refuses_the_load_and_the_rest_of_the_plan_still_goes(lock_first_victim, caplog):
    h, node = two_lanes_short()
    planned = lock_first_victim(gate)
    with caplog.at_level("DEBUG", logger=logger.name):
        assert h.load(node) == (False, h.ps)  # the lane-3 leaf went, the locked lane-2 leaf stayed
    assert len(planned) == 1 and len(planned[0]) == 2
    assert warnings_of(caplog) == [
        f"owner-lane load-back: node {node}, the planned eviction freed less than planned (load refused); "
        "planned=[0,0,1,1] freed=[0,0,0,1] need=[1,1,1,1] free=[1,1,0,1]"
    ]
    counters = counters_of(h.cache)
    assert counters.warnings == {WARN_SHORT_EVICTION: 1}
    assert counters.refused == 1 and counters.load_backs == 0
    assert counters.pages_evicted_per_lane == [0, 0, 0, 1] and counters.leaves_evicted == 2
    assert h.alloc.class_free_page_counts() == [1, 1, 0, 1] and h.tree.node_by_id(node).evicted


def test_a_shortfall_another_request_made_up_for_loads_and_is_still_reported(lock_first_victim, caplog):
    h, node, lane2_hold = over_covered()
    lock_first_victim(gate, between=lambda: h.release(lane2_hold))  # a request ends: a lane-2 page back
    with caplog.at_level("WARNING", logger=logger.name):
        assert h.load(node) == (True, 0)
    assert warnings_of(caplog) == [
        f"owner-lane load-back: node {node}, the planned eviction freed less than planned; "
        "planned=[0,0,1,1] freed=[0,0,1,0] need=[1,1,1,1] free=[1,1,1,1]"
    ]
    counters = counters_of(h.cache)
    assert counters.warnings == {WARN_SHORT_EVICTION: 1} and counters.load_backs == 1 and counters.refused == 0
    assert not h.tree.node_by_id(node).evicted


def test_upstreams_load_failing_after_admission_is_counted_and_reported(monkeypatch, caplog):
    """STAND-IN: the controller's H->D load answers None (its device draw failed: a draw the gate
    could not see); upstream's load then fails, the outcome is counted as refused and the warning
    names the lanes' free pages."""
    h, node = two_lanes_short()
    monkeypatch.setattr(h.cc, "load", lambda **kwargs: None)
    with caplog.at_level("WARNING", logger=logger.name):
        ok, _ = h.load(node)
    assert not ok
    free = h.alloc.class_free_page_counts()
    assert warnings_of(caplog) == [
        f"owner-lane load-back: node {node} admitted per lane but upstream's load failed; "
        f"free=[{','.join(map(str, free))}]"
    ]
    counters = counters_of(h.cache)
    assert counters.warnings == {WARN_SHORT_EVICTION: 1} and counters.refused == 1 and counters.load_backs == 0


def test_capacity_shortfall_hands_the_rest_to_upstreams_eviction(lock_first_victim, caplog):
    h, _node = two_lanes_short()
    lock_first_victim(cap)
    evictable = h.cache.full_evictable_size()
    with caplog.at_level("WARNING", logger=logger.name):
        h.alloc.evict_to_free_tokens(h.cache, 16)
    assert warnings_of(caplog) == [
        "owner-lane capacity eviction: the planned eviction freed less than planned, upstream's eviction "
        "continues; planned=[0,0,1,1] freed=[0,0,0,1] need=[1,1,1,1] free=[1,1,0,1]"
    ]
    counters = counters_of(h.cache)
    assert counters.warnings == {WARN_SHORT_EVICTION: 1} and counters.capacity_plans == 1
    # upstream's lane-blind eviction took over: everything unlocked went, lane 2's locked page stayed
    assert h.evicted_tokens == evictable - h.ps and h.alloc.class_free_page_counts()[2] == 0
