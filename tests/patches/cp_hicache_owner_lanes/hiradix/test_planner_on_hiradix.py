"""The CPU planner on upstream's real HiRadixCache: zero tensor work, the hiradix state's leaf index.

What holds on the real class only: planning reads no tensor, the index the hiradix state installs follows
upstream's own leaf set, and the load-back hook hands it to the planner. The planner's semantics run on
every pin on the stand-in tree (``../test_planner_*.py``), held to this class by ``test_planner_chains.py``.
"""

from __future__ import annotations

import random

import pytest

import sglang_overlay
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of
from sglang_overlay.patches.cp_hicache_owner_lanes.leaf_index import LeafOrderIndex
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, lane_need, plan_owner_lane_eviction
from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc
from tests.support.hicache_tensor_count import count_tensor_work


@pytest.fixture(scope="module", autouse=True)
def overlay():
    sglang_overlay.apply()


def _busy_cache(leaves=300, n=8, ps=16, seed=0):
    """Shared prompts with many conversation leaves of mixed lengths, plus an
    evicted target chain; returns (cache, target tokens)."""
    rng = random.Random(seed)
    cache = hc.build_cpu_hicache(n, ps, 4 * leaves // n + 16, layers=1, heads=1, head_dim=1)
    prompts = [[p * 10_000_000 + i for i in range(4 * ps)] for p in range(8)]
    target = [99_000_000 + i for i in range(2 * n * ps)]
    hc.prefill(cache, target)
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    evict_planned(cache, [hc.path_nodes(cache, target)[-1][0]])
    hc.settle(cache)
    placed = 0
    for i in range(leaves):
        prompt = prompts[rng.randrange(len(prompts))]
        turn = [50_000_000 + i * 1000 + j for j in range(rng.randint(1, 3) * ps)]
        placed += hc.prefill(cache, prompt + turn) is not None
    assert placed >= 0.9 * leaves
    return cache, target


def test_planning_does_no_tensor_work():
    cache, target = _busy_cache()
    state = state_of(cache)
    nodes = [x for x, _ in hc.path_nodes(cache, target)]
    assert all(x.evicted for x in nodes)
    free = cache.token_to_kv_pool_allocator.class_free_page_counts()
    # Make the request need more than every lane has.
    free = [0] * len(free)
    with count_tensor_work() as work:
        need = lane_need(nodes, state.shard_size)
        plan = plan_owner_lane_eviction(cache, need, free, state.index, state.shard_size)
    finish_plan(plan)
    assert plan.covered and len(plan.leaves) > 1
    assert work.total == 0, (work.function_calls[:5], work.aten_ops[:5])
    assert work.host_syncs == 0
    # The counter sees the fork's tensor-derived counting (the test can fail).
    with count_tensor_work() as oracle_work:
        for leaf in plan.leaves:
            hc.oracle_owner_counts(leaf, state.shard_size, cache.page_size)
    assert oracle_work.total > 0 and oracle_work.host_syncs > 0


def test_index_walk_equals_upstream_priority_order():
    cache, _ = _busy_cache(leaves=120, seed=3)
    rng = random.Random(5)
    # Touch random chains (bumps last_access_time of their nodes), as matches do.
    for leaf in rng.sample(sorted(cache.evictable_leaves, key=lambda x: x.id), 40):
        toks = []
        node = leaf
        while node is not cache.root_node:
            toks = list(node.key.token_ids) + toks
            node = node.parent
        cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(toks)))
    state = state_of(cache)
    popped = []
    walked = list(state.index.ordered(popped))
    state.index.restore(popped)
    expected = sorted(cache.evictable_leaves, key=lambda x: cache.eviction_strategy.get_priority(x))
    assert walked == expected
    # and the index survives the walk intact
    popped2 = []
    assert list(state.index.ordered(popped2)) == expected
    state.index.restore(popped2)


def test_index_stays_bounded():
    cache, _ = _busy_cache(leaves=60, seed=9)
    index: LeafOrderIndex = state_of(cache).index
    assert len(index) <= 2 * len(cache.evictable_leaves) + index.COMPACT_SLACK


def test_a_load_back_plans_through_the_leaf_index():
    """The load-back hook hands its cache's leaf index to the planner: with every lane drained, loading
    the evicted target reads a fraction of the leaves' priorities, where a full scan reads them all."""
    cache, target = _busy_cache(leaves=200, seed=8)
    alloc = cache.token_to_kv_pool_allocator
    for lane, free in enumerate(alloc.class_free_page_counts()):  # running requests hold every free page
        for _ in range(free):
            assert hc.alloc_chain(cache, 0, alloc.page_size, lane)[0] is not None
    assert not any(alloc.class_free_page_counts())
    strategy, index = cache.eviction_strategy, state_of(cache).index
    real, calls = strategy.get_priority, []
    counted = lambda node: (calls.append(node), real(node))[1]  # noqa: E731
    strategy.get_priority = index.get_priority = counted
    try:
        node = hc.path_nodes(cache, target)[-1][0]
        assert cache.load_back(node) is not None
    finally:
        del strategy.get_priority
        index.get_priority = real
    leaves = len(cache.evictable_leaves)
    assert 0 < len(calls) < leaves // 2, (len(calls), leaves)
