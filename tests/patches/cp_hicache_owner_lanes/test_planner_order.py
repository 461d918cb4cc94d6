"""The owner-lane planner's walk order on the plain stand-in tree, on every pin: the leaf index walks upstream's
eviction-strategy priority order and stays bounded, a monotone strategy reads few priorities, a non-monotone one
is planned by a full scan in its order, the walk stops once covered, and the index comes back whole after a plan,
a refusal or a walk that raises.

Trees are ``tests/support/plain_tree.py`` (a STAND-IN: plain nodes under HiRadixCache's leaf, lock and access
rules, upstream's eviction strategies); no release's cache class is built.
Invariant: the plan is the same with or without the index, and no leaf is lost from it. Cost: in-process, trees
of up to 200 leaves (tenths of a second).
"""

from __future__ import annotations

import random

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes import planner
from sglang_overlay.patches.cp_hicache_owner_lanes.leaf_index import LeafOrderIndex
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, plan_owner_lane_eviction
from tests.patches.cp_hicache_owner_lanes.planner_trees import busy_tree, indexed_tree, leaf, plan_for
from tests.support import hicache_trees as ht


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
