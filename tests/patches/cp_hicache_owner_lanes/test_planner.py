"""The owner-lane planner's semantics on the plain stand-in tree, on every pin.

Trees are ``tests/support/plain_tree.py`` (a STAND-IN: plain nodes under 0.5.20 HiRadixCache's leaf, lock
and access rules, upstream's eviction strategies); no release's cache class is built. On 0.5.20 the
hiradix folder checks that the stand-in plans exactly as the real HiRadixCache does on the same specs.
Oracles are exact (``tests/support/hicache_trees.py``): the planner never refuses a coverable deficit,
plans a closed eviction order of needed units and stays within D * (M - 1) pages of the optimum.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes import planner
from sglang_overlay.patches.cp_hicache_owner_lanes.leaf_index import LeafOrderIndex
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, lane_need, plan_owner_lane_eviction
from tests.support import hicache_trees as ht
from tests.support import plain_tree as pt

_PAGES = itertools.count(10_000)


def plan_for(tree, deficit, n, index=None):
    plan = plan_owner_lane_eviction(tree, list(deficit), [0] * n, tree.index if index is None else index, n)
    finish_plan(plan)
    return plan


def leaf(tree, lane, pages=1):
    """A chain of ``pages`` pages from the root, its first page in ``lane``; returns its node."""
    return tree.insert([next(_PAGES) for _ in range(pages)], lane)


def indexed_tree(n, policy="lru"):
    tree = pt.PlainTree(n, policy)
    tree.index = pt.leaf_index(tree)
    return tree


def busy_tree(leaves=300, n=8, seed=0):
    """Shared prompts with many conversation leaves of one to three chains' worth of pages, plus an
    evicted target chain (two pages per lane); returns (tree, target path)."""
    rng = random.Random(seed)
    tree = indexed_tree(n)
    ps = 2  # pages per "turn unit"
    prompts = [[p * 10_000_000 + i for i in range(4 * ps)] for p in range(8)]
    target = [99_000_000 + i for i in range(2 * n)]
    tree.insert(target, 0)
    tree.evict(tree.path(target)[-1])
    for i in range(leaves):
        prompt = prompts[rng.randrange(len(prompts))]
        tree.insert(prompt + [50_000_000 + i * 1000 + j for j in range(rng.randint(1, 3) * ps)], rng.randrange(n))
    return tree, target


# --------------------------------------------------------------------------- priority order and the index


def test_index_walk_equals_the_strategy_priority_order():
    tree, _ = busy_tree(leaves=120, seed=3)
    rng = random.Random(5)
    for x in rng.sample(sorted(tree.evictable_leaves, key=ht.path_key), 40):
        tree.match(ht.path_key(x))  # bumps last_access_time along the path, as a hit does
    popped = []
    walked = list(tree.index.ordered(popped))
    tree.index.restore(popped)
    expected = sorted(tree.evictable_leaves, key=tree.eviction_strategy.get_priority)
    assert walked == expected
    popped2 = []
    assert list(tree.index.ordered(popped2)) == expected  # the index survives the walk intact
    tree.index.restore(popped2)


def test_index_stays_bounded():
    tree, _ = busy_tree(leaves=60, seed=9)
    index: LeafOrderIndex = tree.index
    assert len(index) <= 2 * len(tree.evictable_leaves) + index.COMPACT_SLACK


def test_planning_through_the_index_reads_few_priorities():
    """A monotone index walks from its heap: planning a one-page deficit reads a handful of
    priorities, where a full scan reads every leaf's."""
    tree, _ = busy_tree(leaves=200, seed=4)
    assert tree.index.monotone is True  # upstream's LRU
    calls = []
    strategy, index = tree.eviction_strategy, tree.index
    real = strategy.get_priority
    counted = lambda node: (calls.append(node), real(node))[1]  # noqa: E731
    strategy.get_priority = index.get_priority = counted
    need = [0] * 8
    need[0] = 1
    try:
        plan = plan_owner_lane_eviction(tree, need, [0] * 8, index, 8)
        finish_plan(plan)
    finally:
        del strategy.get_priority
        index.get_priority = real
    leaves = len(tree.evictable_leaves)
    assert plan.covered and plan.scanned < leaves // 4 and len(calls) < leaves // 2, (plan.scanned, len(calls), leaves)


def test_a_non_monotone_strategy_plans_by_a_full_scan_in_its_order():
    """MRU priorities fall as nodes are used: the index says non-monotone, the planner heaps every leaf
    and takes the most recently used leaf of the short lane."""
    tree = indexed_tree(4, "mru")
    assert tree.index.monotone is False
    old, other, new = leaf(tree, 0), leaf(tree, 1), leaf(tree, 0)
    plan = plan_for(tree, [1, 0, 0, 0], 4)
    assert plan.covered and plan.leaves == [new] and plan.scanned == 1
    tree.match(old.key)
    plan = plan_for(tree, [1, 0, 0, 0], 4)
    assert plan.leaves == [old] and other not in plan.leaves


def test_the_walk_takes_the_oldest_unlocked_leaf_of_the_short_lane_and_stops_once_covered():
    """LRU order: a locked lane-0 leaf, a lane-1 leaf, a lane-0 leaf, a newer lane-0 leaf. A deficit of
    one lane-0 page takes the third: the locked leaf is not evictable, the lane-1 leaf is scanned and
    passed over, and the walk stops as soon as the deficit is covered: exactly 2 leaves scanned."""
    tree = indexed_tree(4)
    locked, other, wanted, newest = (leaf(tree, lane) for lane in (0, 1, 0, 0))
    tree.inc_lock_ref(locked)
    plan = plan_owner_lane_eviction(tree, [1, 0, 0, 0], [0, 5, 5, 5], tree.index, 4)
    finish_plan(plan)
    assert plan.covered and plan.leaves == [wanted] and plan.pages_per_lane == [1, 0, 0, 0]
    assert plan.scanned == 2, plan.scanned
    tree.dec_lock_ref(locked)


def test_a_plan_reads_the_same_with_or_without_the_index_and_leaves_the_index_whole():
    """A refused plan, then the same plan three ways (the index, the index again, a full scan): one answer,
    and the inputs are kept as given. The refusal and each plan hand every popped leaf back to the index."""
    tree = indexed_tree(4)
    leaves = [leaf(tree, lane) for lane in (1, 0, 2, 0, 3)]  # LRU order
    free = [0, 0, 5, 5]

    def plan(need, index):
        p = plan_owner_lane_eviction(tree, need, free, index, 4)
        finish_plan(p)
        return p

    refused = plan([9, 0, 0, 0], tree.index)
    assert not refused.covered and refused.need == [9, 0, 0, 0] and refused.free == free
    assert refused.remaining == [7, 0, 0, 0]  # both lane-0 leaves taken, still short
    plans = [plan([2, 1, 0, 0], tree.index), plan([2, 1, 0, 0], tree.index), plan([2, 1, 0, 0], None)]
    for p in plans:
        assert p.covered and p.need == [2, 1, 0, 0] and p.free == free
        assert p.leaves == [leaves[0], leaves[1], leaves[3]] and p.pages_per_lane == [2, 1, 0, 0]
    assert sorted(map(id, tree.index.ordered([]))) == sorted(map(id, leaves))  # every leaf still indexed


def test_a_walk_that_raises_hands_the_popped_leaves_back_to_the_index(monkeypatch):
    tree = indexed_tree(4)
    leaves = [leaf(tree, lane) for lane in (1, 0, 2)]

    def failing_walk(cache, plan, stream, shard_size):
        next(stream), next(stream)  # two leaves popped from the index
        raise RuntimeError("walk failed")

    monkeypatch.setattr(planner, "_walk", failing_walk)
    with pytest.raises(RuntimeError, match="walk failed"):
        planner.plan_owner_lane_eviction(tree, [1, 1, 0, 0], [0, 0, 5, 5], tree.index, 4)
    assert [id(x) for x in tree.index.ordered([])] == [id(x) for x in leaves]  # whole, in LRU order


# --------------------------------------------------------------------------- what the walk takes


def test_lane_need_sums_the_metadata_of_the_nodes():
    tree = indexed_tree(4)
    chain = tree.insert(list(range(900, 906)), 3)  # six pages from lane 3: lanes 3,0,1,2,3,0
    assert lane_need([chain], 4) == [2, 1, 1, 2]
    top = tree.match(list(range(900, 902)))  # split: 2 + 4 pages
    assert lane_need([top], 4) == [1, 0, 0, 1] and lane_need(tree.path(range(900, 906)), 4) == [2, 1, 1, 2]


def test_a_leaf_without_metadata_is_passed_over_not_the_end_of_the_walk():
    """A leaf the plan needed carries no owner metadata (never stamped): the walk skips it and covers
    the deficit with later leaves."""
    tree, _ = busy_tree(leaves=60, seed=6)
    need = [1] * 8
    baseline = plan_owner_lane_eviction(tree, need, [0] * 8, tree.index, 8)
    finish_plan(baseline)
    first = next(x for x in baseline.leaves if x in tree.evictable_leaves)
    md.put(first, None)
    plan = plan_owner_lane_eviction(tree, need, [0] * 8, tree.index, 8)
    finish_plan(plan)
    assert plan.covered and first not in plan.leaves
    assert baseline.covered and first in baseline.leaves and plan.scanned >= 2


def test_the_root_is_never_walked():
    """One evictable page, of a lane that is not short: the walk scans it, defers it, and ends; the
    root above it (whose only child is now deferred) is not promoted into the walk."""
    tree = indexed_tree(4)
    leaf(tree, 1)
    assert len(tree.evictable_leaves) == 1
    plan = plan_owner_lane_eviction(tree, [1, 0, 0, 0], [0, 4, 4, 4], tree.index, 4)
    finish_plan(plan)
    assert not plan.covered and plan.remaining == [1, 0, 0, 0] and plan.scanned == 1 and plan.leaves == []


def test_plan_keeps_only_needed_leaves():
    """Every planned leaf is needed: dropping any one leaves some lane short."""
    tree, target = busy_tree(leaves=200, seed=11)
    n = 8
    nodes = tree.path(target)
    checked = 0
    for free_pages in (0, 1, 2):
        plan = plan_owner_lane_eviction(tree, lane_need(nodes, n), [free_pages] * n, tree.index, n)
        finish_plan(plan)
        if not plan.covered:
            continue
        checked += 1
        counts = [md.get(x).owner_counts() for x in plan.leaves]
        total = [sum(c[lane] for c in counts) for lane in range(n)]
        assert total == plan.pages_per_lane
        assert all(total[lane] >= plan.deficit[lane] for lane in range(n))
        for c, x in zip(counts, plan.leaves):
            if x.parent in plan.leaves:
                continue
            assert any(total[lane] - c[lane] < plan.deficit[lane] for lane in range(n))
    assert checked >= 1


def test_prune_drops_an_older_leaf_a_later_pick_made_redundant():
    """The walk takes the oldest lane-0 leaf, then a two-page leaf for lane 1 that also frees lane 0:
    the first pick is dropped again."""
    tree = indexed_tree(4)
    single, double = leaf(tree, 0), leaf(tree, 0, pages=2)  # lane 0, oldest; lanes 0 and 1
    plan = plan_for(tree, [1, 1, 0, 0], 4)
    assert plan.covered and plan.leaves == [double] and plan.pages_per_lane == [1, 1, 0, 0]
    assert single not in plan.leaves and plan.scanned == 2


# --------------------------------------------------------------------------- child-then-parent chains


def single_child_chain(n=4, policy="lru"):
    """Parent: one page in lane 0; its only child: one page in lane 1."""
    return pt.build_tree(n, [(-1, 0, 1, 0), (0, 1, 1, 0)], policy=policy)


@pytest.mark.parametrize("policy", ["lru", "mru"])
def test_interior_lane_page_behind_a_useless_child_is_covered(policy):
    """Lane 0 is short, the only lane-0 page sits in an interior node whose one
    child frees only lane 1: evict the child, then the parent."""
    tree, pages, _ = single_child_chain(policy=policy)
    parent, child = tree.path(pages[1])
    assert ht.coverable(tree, [1, 0, 0, 0], 4)
    plan = plan_for(tree, [1, 0, 0, 0], 4)
    assert plan.covered, plan.remaining
    assert plan.leaves == [child, parent]  # children first: upstream's eviction order
    assert plan.pages_per_lane == [1, 1, 0, 0]
    assert ht.check_against_oracles(tree, plan, [1, 0, 0, 0], 4) == 0


def test_locked_child_blocks_the_chain_and_nothing_is_planned():
    tree, pages, _ = single_child_chain()
    tree.inc_lock_ref(tree.path(pages[1])[-1])  # locks the parent too
    plan = plan_for(tree, [1, 0, 0, 0], 4)
    assert not plan.covered and plan.remaining == [1, 0, 0, 0]
    assert not ht.coverable(tree, [1, 0, 0, 0], 4)
    ht.check_against_oracles(tree, plan, [1, 0, 0, 0], 4)


def test_a_leaf_that_frees_the_lane_directly_wins_when_older():
    """Priority order decides between a direct leaf and a chain: the older goes."""
    # chain: parent lane 0 + child lane 1 (created first: older); then a lane-0 leaf
    tree, pages, _ = pt.build_tree(4, [(-1, 0, 1, 0), (0, 1, 1, 0), (-1, 0, 1, 0)])
    direct = tree.path(pages[2])[-1]
    parent, child = tree.path(pages[1])
    plan = plan_for(tree, [1, 0, 0, 0], 4)
    assert plan.leaves == [child, parent]  # the chain is older than the leaf
    tree.match(pages[1])  # touch the chain: now the direct leaf is the older one and is taken alone
    plan = plan_for(tree, [1, 0, 0, 0], 4)
    assert plan.leaves == [direct]


def test_deep_chain_of_useless_nodes():
    """Lane 0 only at the top of a three-node chain whose lower nodes free other lanes."""
    tree, pages, _ = pt.build_tree(4, [(-1, 0, 1, 0), (0, 1, 1, 0), (1, 2, 2, 0)])
    nodes = tree.path(pages[2])
    assert len(nodes) == 3
    plan = plan_for(tree, [1, 0, 0, 0], 4)
    assert plan.leaves == nodes[::-1]
    ht.check_against_oracles(tree, plan, [1, 0, 0, 0], 4)


# --------------------------------------------------------------------------- property tests

chains = st.lists(
    st.tuples(st.integers(-1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(0, 3)),
    min_size=1,
    max_size=7,
)
POLICY = st.sampled_from(["lru", "lfu", "fifo", "mru"])


def property_case(data, n, specs, policy):
    touches = data.draw(st.lists(st.integers(0, 10), max_size=3), label="touches")
    locks = data.draw(st.lists(st.integers(0, 10), max_size=2), label="locks")
    tree, _, _ = pt.build_tree(n, specs, touches, locks, policy=policy)
    if len(ht.device_nodes(tree)) > 12:
        return None
    deficit = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n), label="deficit")
    if not any(deficit):
        return None
    return ht.check_against_oracles(tree, plan_for(tree, deficit, n), deficit, n)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from([2, 3, 4]), specs=chains, policy=POLICY, data=st.data())
def test_planner_never_refuses_a_coverable_deficit_and_stays_within_its_bound(n, specs, policy, data):
    property_case(data, n, specs, policy)


@pytest.mark.ci_slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from([2, 3, 4]), specs=chains, policy=POLICY, data=st.data())
def test_planner_bound_ci_slow(n, specs, policy, data):
    property_case(data, n, specs, policy)
