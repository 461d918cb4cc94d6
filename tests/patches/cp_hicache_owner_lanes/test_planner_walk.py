"""What the owner-lane planner's walk takes, on the plain stand-in tree, on every pin: lane needs summed from the
nodes' metadata, a leaf without metadata passed over, never the root, only needed leaves (an older pick a later
one made redundant is pruned), and child-then-parent chains that reach a lane page behind useless children.

Trees are ``tests/support/plain_tree.py`` (a STAND-IN: plain nodes under HiRadixCache's leaf, lock and access
rules, upstream's eviction strategies); no release's cache class is built.
Oracles are exact (``tests/support/hicache_trees.py``). Invariant: children before parents (upstream's eviction
order), and every planned leaf is needed. Cost: in-process, trees of up to 200 leaves.
"""

from __future__ import annotations

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, plan_owner_lane_eviction
from tests.patches.cp_hicache_owner_lanes.planner_trees import busy_tree, indexed_tree, leaf, plan_for
from tests.support import hicache_trees as ht
from tests.support import plain_tree as pt


def test_lane_need_sums_the_metadata_of_the_nodes():
    tree = indexed_tree(4)
    chain = tree.insert(list(range(900, 906)), 3)  # six pages from lane 3: lanes 3,0,1,2,3,0
    assert tree.lane_need([chain]) == [2, 1, 1, 2]
    top = tree.match(list(range(900, 902)))  # split: 2 + 4 pages
    assert tree.lane_need([top]) == [1, 0, 0, 1] and tree.lane_need(tree.path(range(900, 906))) == [2, 1, 1, 2]


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
        plan = plan_owner_lane_eviction(tree, tree.lane_need(nodes), [free_pages] * n, tree.index, n)
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
