"""cp-hicache-owner-lanes on sglang 0.5.23: the load-back planner's per-lane need and its cost, on upstream's
real UnifiedRadixCache, HybridCacheController, PageInterleavePoolAllocator and host pool (CPU; stand-ins named in
this folder's hicache_cpu_standins.py).

The need the planner reads from rotation phases (no tensor) equals upstream's own draw and the lanes the load
actually allocated, for host chains, host suffixes under resident prefixes and multi-node segments; nothing to
load needs nothing; planning a long walk on a busy tree does no tensor op and no host sync. Invariant: the
oracles read upstream's spec and the device indices (load_back_oracles.py), and the tensor counter is shown to
see tensor-derived counting. The hook is installed (conftest.py) as in a server; the planner is called directly, so these hold with the
hook off too. Cost: a few seconds.
"""

from __future__ import annotations

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import evicted_segment, plan_load_back
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.patches.cp_hicache_owner_lanes.unified.load_back_oracles import loaded_lanes, upstream_need
from tests.support.hicache_tensor_count import count_tensor_work


@pytest.fixture(scope="module", autouse=True)
def hook(gate_hook):
    """The load-back hook (conftest.py's ``gate_hook``) for every test here."""


@pytest.mark.parametrize("n,ps", [(4, 4), (2, 2), (3, 2)])
def test_lane_need_matches_allocated_indices(n, ps):
    h = Harness(n=n, ps=ps, pages_per_rank=12)
    h.cache.load_back_threshold = 1
    state = state_of(h.cache)
    cases = []
    for base, pages in ((0, 1), (1, 3), (n - 1, 5), (2 % n, 2)):
        keys, _ = h.chain(base, pages)
        cases.append(h.to_host(keys))
    # a host suffix under a resident prefix: its phase is the base plus the prefix's pages
    prefix, _ = h.chain(1, 3)
    keys, _ = h.chain(1, 2, prefix=prefix)
    cases.append(h.to_host(keys, levels=1))
    # a two-node host segment
    prefix, _ = h.chain(2 % n, 1)
    keys, _ = h.chain(2 % n, 3, prefix=prefix)
    cases.append(h.to_host(keys))
    for node in cases:
        segment = evicted_segment(h.tree, node)
        tokens, need, _free, _plan = plan_load_back(h.cache, state, node)
        assert tokens == sum(len(x.key) for x in segment)
        assert need == upstream_need(h, node)
        assert h.load(node)[0]
        assert loaded_lanes(h, [x.id for x in segment]) == need
        for x in segment:  # upstream's rotation phase is what the planner reads per node
            assert h.tree.rotation_phase_of(x.id) % n == int(x.component_data[0].value[0]) // ps % n


def busy(h, short_lane, leaves=40, seed=3):
    """Many evictable one- and two-page chains, some with children; ``short_lane`` drained."""
    import random

    rng = random.Random(seed)
    keys, _ = h.chain(short_lane, h.n)  # the load: one page in every lane
    target = h.to_host(keys)
    h.random_chains(rng, leaves)
    h.hold(short_lane, h.alloc.class_free_page_counts()[short_lane])
    return target


def test_planning_does_no_tensor_work():
    h = Harness(n=4, ps=4, pages_per_rank=24)
    target = busy(h, short_lane=2)
    state = state_of(h.cache)
    free = h.alloc.class_free_page_counts()
    free = [0] * len(free)  # every lane short: a long walk
    with count_tensor_work() as work:
        tokens, need, _, plan = plan_load_back(h.cache, state, target, free=free)
    assert plan.covered and len(plan.leaves) >= 2 and plan.scanned >= len(plan.leaves)
    assert work.total == 0, (work.function_calls[:5], work.aten_ops[:5])
    assert work.host_syncs == 0
    # the counter does see tensor-derived counting (so this test can fail)
    with count_tensor_work() as oracle:
        for node in plan.leaves:
            h.lanes_of(node.component_data[0].value)
    assert oracle.total > 0


def test_lane_need_of_nothing_to_load_is_zero_in_every_lane():
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.lane_tree import UnifiedLaneTree
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import lane_need

    h = Harness(n=3, ps=2)
    state = state_of(h.cache)
    assert lane_need(UnifiedLaneTree(h.tree, state.priority, 3, 2), []) == (0, [0, 0, 0])
