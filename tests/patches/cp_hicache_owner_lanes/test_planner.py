"""Owner metadata arithmetic and the CPU planner: closed forms, order, zero tensor work."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("sglang.srt.mem_cache.hiradix_cache")

import sglang_overlay  # noqa: E402
from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md  # noqa: E402
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import (  # noqa: E402
    LeafOrderIndex,
    finish_plan,
    lane_need,
    plan_owner_lane_eviction,
)
from sglang_overlay.patches.cp_hicache_owner_lanes.state import state_of  # noqa: E402
from tests.support import hicache_cpu as hc  # noqa: E402
from tests.support.hicache_tensor_count import count_tensor_work  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def overlay():
    sglang_overlay.apply()


@settings(max_examples=300, deadline=None)
@given(
    n=st.sampled_from([1, 2, 3, 4, 8]),
    first=st.integers(0, 7),
    start=st.integers(0, 50),
    pages=st.integers(1, 40),
    data=st.data(),
)
def test_metadata_closed_form_and_split(n, first, start, pages, data):
    first %= n
    meta = md.CpHiCacheNodeMetadata(n, first, start, pages)
    explicit = [0] * n
    for p in range(pages):
        explicit[(first + p) % n] += 1
    assert meta.owner_counts() == tuple(explicit)
    assert meta.rotation_base == (first - start) % n
    for d in [d for d in range(1, n + 1) if n % d == 0]:
        folded = [0] * d
        for p in range(pages):
            folded[((first + p) % n) % d] += 1
        assert meta.owner_counts(d) == tuple(folded)
        assert d in meta.owner_counts_by_size
    if pages > 1:
        cut = data.draw(st.integers(1, pages - 1))
        left, right = meta.split(cut)
        assert left.rotation_base == right.rotation_base == meta.rotation_base
        assert tuple(a + b for a, b in zip(left.owner_counts(), right.owner_counts())) == meta.owner_counts()
        assert left.continuation(right.num_pages) == right


def test_metadata_rejects_bad_input():
    """Each refusal names what is wrong; the bounds themselves are accepted."""
    with pytest.raises(ValueError, match=r"^shard_size must be >= 1, got 0$"):
        md.CpHiCacheNodeMetadata(0, 0, 0, 1)
    with pytest.raises(ValueError, match=r"^first_owner 4 out of range for shard_size 4$"):
        md.CpHiCacheNodeMetadata(4, 4, 0, 1)
    with pytest.raises(ValueError, match=r"^negative page span \(start_page=-1, num_pages=1\)$"):
        md.CpHiCacheNodeMetadata(4, 0, -1, 1)
    with pytest.raises(ValueError, match=r"^negative page span \(start_page=0, num_pages=-1\)$"):
        md.CpHiCacheNodeMetadata(4, 0, 0, -1)
    empty = md.CpHiCacheNodeMetadata(1, 0, 0, 0)  # a node of no whole page: owns nothing
    assert empty.owner_counts() == (0,) and empty.next_owner == 0
    with pytest.raises(ValueError, match=r"^owner counts for CP size 3 are not defined on a node placed for "
                                         r"shard size 4 \(n must divide it\)$"):
        md.CpHiCacheNodeMetadata(4, 0, 0, 3).owner_counts(3)
    for at in (0, 3):
        with pytest.raises(ValueError, match=rf"^split at page {at} of a 3-page node$"):
            md.CpHiCacheNodeMetadata(4, 0, 0, 3).split(at)


def _busy_cache(leaves=300, n=8, ps=16, seed=0):
    """Shared prompts with many conversation leaves of mixed lengths, plus an
    evicted target chain; returns (cache, target tokens)."""
    rng = random.Random(seed)
    cache = hc.build_cpu_hicache(n, ps, 4 * leaves // n + 16, layers=1, heads=1, head_dim=1)
    prompts = [[p * 10_000_000 + i for i in range(4 * ps)] for p in range(8)]
    target = [99_000_000 + i for i in range(2 * n * ps)]
    hc.prefill(cache, target)
    from sglang_overlay.patches.cp_hicache_owner_lanes.load_back import evict_planned

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


class _Leaf:
    """A stand-in leaf for the index's own unit tests: a priority and an identity, nothing else."""

    def __init__(self, prio):
        self.prio = prio

    def __repr__(self):
        return f"_Leaf({self.prio})"


def _prio_of(calls):
    def get_priority(node):
        calls.append(node)
        return node.prio

    return get_priority


def test_upstreams_monotone_strategies_are_told_apart():
    from sglang.srt.mem_cache import evict_policy as ep
    from sglang_overlay.patches.cp_hicache_owner_lanes.planner import is_monotone

    assert [is_monotone(ep.LRUStrategy()), is_monotone(ep.LFUStrategy()), is_monotone(ep.FIFOStrategy())] == [True] * 3
    assert [is_monotone(ep.MRUStrategy()), is_monotone(ep.FILOStrategy()), is_monotone(object())] == [False] * 3


def test_notifying_set_calls_the_hook_given_at_construction():
    from sglang_overlay.patches.cp_hicache_owner_lanes.planner import NotifyingLeafSet

    seen = []
    leaves = NotifyingLeafSet({1}, on_add=seen.append)
    leaves.add(2)
    assert seen == [2] and leaves == {1, 2}


def test_index_compacts_exactly_past_its_bound():
    """Stale entries (leaves that left the set) pile up lazily until the heap passes
    2 x leaves + slack; then one rebuild keeps only live leaves, each read once."""
    a, b = _Leaf(0), _Leaf(1)
    leaves = {a, b}
    calls = []
    index = LeafOrderIndex(leaves, _prio_of(calls), True)
    index.COMPACT_SLACK = 4
    assert len(index) == 2 and sorted(calls, key=id) == sorted([a, b], key=id)
    sizes = []
    for i in range(12):
        x = _Leaf(10 + i)
        leaves.add(x)
        index.note(x)  # three live leaves at the note: the bound is 2 x 3 + 4 = 10
        leaves.discard(x)
        sizes.append(len(index))
    assert sizes == [3, 4, 5, 6, 7, 8, 9, 10, 3, 4, 5, 6]
    calls.clear()
    popped = []
    assert list(index.ordered(popped)) == [a, b]


def test_a_stale_leaf_that_returns_is_queued_again():
    a, x = _Leaf(0), _Leaf(5)
    leaves = {a, x}
    index = LeafOrderIndex(leaves, _prio_of([]), True)
    leaves.discard(x)  # x leaves the set: its entry goes stale
    popped = []
    assert list(index.ordered(popped)) == [a]  # the walk drops the stale entry
    index.restore(popped)
    leaves.add(x)
    index.note(x)  # back in the set: must be walked again
    popped = []
    assert list(index.ordered(popped)) == [a, x]


def test_planning_through_the_index_reads_few_priorities():
    """A monotone index walks from its heap: planning a one-page deficit reads a handful of
    priorities, where a full scan reads every leaf's."""
    cache, _ = _busy_cache(leaves=200, seed=4)
    state = state_of(cache)
    assert state.index.monotone is True  # upstream's default LRU
    calls = []
    strategy, index = cache.eviction_strategy, state.index
    real = strategy.get_priority
    counted = lambda node: (calls.append(node), real(node))[1]  # noqa: E731
    strategy.get_priority = index.get_priority = counted  # the walk's reads and the index's
    need = [0] * state.shard_size
    need[0] = 1
    try:
        plan = plan_owner_lane_eviction(cache, need, [0] * state.shard_size, index, state.shard_size)
        finish_plan(plan)
    finally:
        del strategy.get_priority
        index.get_priority = real
    leaves = len(cache.evictable_leaves)
    assert plan.covered and plan.scanned < leaves // 4 and len(calls) < leaves // 2, (plan.scanned, len(calls), leaves)


def test_a_leaf_without_metadata_is_passed_over_not_the_end_of_the_walk():
    """A leaf the plan needed turns out to carry no owner metadata (never stamped): the walk skips it
    and covers the deficit with later leaves."""
    cache, _ = _busy_cache(leaves=60, seed=6)
    state = state_of(cache)
    need = [1] * state.shard_size
    baseline = plan_owner_lane_eviction(cache, need, [0] * state.shard_size, state.index, state.shard_size)
    finish_plan(baseline)
    first = next(x for x in baseline.leaves if x in cache.evictable_leaves)
    md.put(first, None)
    plan = plan_owner_lane_eviction(cache, need, [0] * state.shard_size, state.index, state.shard_size)
    finish_plan(plan)
    assert plan.covered and first not in plan.leaves
    assert baseline.covered and first in baseline.leaves and plan.scanned >= 2


def test_the_root_is_never_walked():
    """One evictable page, of a lane that is not short: the walk scans it, defers it, and ends; the
    root above it (whose only child is now deferred) is not promoted into the walk."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams

    cache = hc.build_cpu_hicache(4, 4, 8)
    state = state_of(cache)
    toks = list(range(77_000, 77_004))
    new, base = hc.alloc_chain(cache, 0, len(toks), 1)
    cache.insert(InsertParams(key=hc.key_of(toks), value=new.clone(), rotation_base=base))
    hc.settle(cache)
    assert len(cache.evictable_leaves) == 1
    plan = plan_owner_lane_eviction(cache, [1, 0, 0, 0], [0, 4, 4, 4], state.index, state.shard_size)
    finish_plan(plan)
    assert not plan.covered and plan.remaining == [1, 0, 0, 0] and plan.scanned == 1 and plan.leaves == []


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


def test_plan_keeps_only_needed_leaves():
    """Every planned leaf is needed: dropping any one leaves some lane short."""
    cache, target = _busy_cache(leaves=200, seed=11)
    state = state_of(cache)
    nodes = [x for x, _ in hc.path_nodes(cache, target)]
    n = state.shard_size
    checked = 0
    for free_pages in (0, 1, 2):
        need = lane_need(nodes, n)
        free = [free_pages] * n
        plan = plan_owner_lane_eviction(cache, need, free, state.index, n)
        finish_plan(plan)
        if not plan.covered:  # this tree cannot cover that much in every lane
            continue
        checked += 1
        counts = [md.get(x).owner_counts() for x in plan.leaves]
        total = [sum(c[lane] for c in counts) for lane in range(n)]
        assert total == plan.pages_per_lane
        assert all(total[lane] >= plan.deficit[lane] for lane in range(n))
        for c, leaf in zip(counts, plan.leaves):
            if leaf.parent in plan.leaves:
                continue
            assert any(total[lane] - c[lane] < plan.deficit[lane] for lane in range(n))
    assert checked >= 1
