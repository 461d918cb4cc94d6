"""Owner-lane planning through child-then-parent chains, against exact oracles.

Trees are upstream's real HiRadixCache over a real PageInterleavePoolAllocator
(tests/support/hicache_trees.py). The oracles are exact: ``coverable`` (the union of
every unlocked device node) and ``optimum_pages`` (brute force over every valid
eviction set). The planner must never refuse a coverable deficit and must stay
within its stated bound of the optimum: at most D units (D = total deficit pages),
hence at most D * (M - 1) pages beyond the optimum, M the largest unit.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sglang_overlay
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, plan_owner_lane_eviction
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of
from tests.support import hicache_trees as ht
from tests.support.hicache_tensor_count import count_tensor_work


@pytest.fixture(scope="module", autouse=True)
def overlay():
    sglang_overlay.apply()


def plan_for(cache, deficit, n):
    state = state_of(cache)
    with count_tensor_work() as work:
        plan = plan_owner_lane_eviction(cache, list(deficit), [0] * n, state.index, n)
    finish_plan(plan)
    return plan, work


def check_against_oracles(cache, plan, work, deficit, n):
    """Every property the planner promises, checked against the exact oracles."""
    assert work.total == 0 and work.host_syncs == 0
    coverable = ht.coverable(cache, deficit, n)
    assert plan.covered == coverable, (deficit, plan.remaining)
    if not coverable:
        return None
    assert ht.is_closed_eviction_order(plan)
    assert all(x.lock_ref == 0 and x.value is not None for x in plan.leaves)
    totals = ht.lane_totals(plan.leaves, n)
    assert totals == plan.pages_per_lane
    assert all(totals[c] >= deficit[c] for c in range(n))
    units = ht.plan_units(plan)
    for unit in units:  # minimal: without its root's own pages some lane falls short
        own = ht.lane_totals(unit[:1], n)
        assert any(totals[c] - own[c] < deficit[c] for c in range(n)), "a redundant unit was kept"
    d = sum(deficit)
    m = max(ht.pages_of(u, n) for u in units)
    pages = ht.pages_of(plan.leaves, n)
    optimum = ht.optimum_pages(cache, deficit, n)
    assert optimum is not None and optimum >= d
    assert len(units) <= d  # every unit is needed by some lane
    assert pages <= d * m
    assert pages - optimum <= d * (m - 1), (pages, optimum, d, m)
    return pages - optimum


# --------------------------------------------------------------------------- the chain case


def single_child_chain(n=4, policy="lru"):
    """Parent: one page in lane 0; its only child: one page in lane 1."""
    return ht.build_tree(n, [(-1, 0, 1, 0), (0, 1, 1, 0)], policy=policy)


@pytest.mark.parametrize("policy", ["lru", "mru"])
def test_interior_lane_page_behind_a_useless_child_is_covered(policy):
    """Lane 0 is short, the only lane-0 page sits in an interior node whose one
    child frees only lane 1: evict the child, then the parent."""
    cache, tokens, _ = single_child_chain(policy=policy)
    (parent, _), (child, _) = ht.hc.path_nodes(cache, tokens[1])
    assert ht.coverable(cache, [1, 0, 0, 0], 4)
    plan, work = plan_for(cache, [1, 0, 0, 0], 4)
    assert plan.covered, plan.remaining
    assert plan.leaves == [child, parent]  # children first: upstream's eviction order
    assert plan.pages_per_lane == [1, 1, 0, 0]
    assert check_against_oracles(cache, plan, work, [1, 0, 0, 0], 4) == 0


def test_locked_child_blocks_the_chain_and_nothing_is_planned():
    cache, tokens, _ = single_child_chain()
    child = ht.hc.path_nodes(cache, tokens[1])[-1][0]
    cache.inc_lock_ref(child)  # locks the parent too
    plan, work = plan_for(cache, [1, 0, 0, 0], 4)
    assert not plan.covered and plan.remaining == [1, 0, 0, 0]
    assert not ht.coverable(cache, [1, 0, 0, 0], 4)
    check_against_oracles(cache, plan, work, [1, 0, 0, 0], 4)


def test_a_leaf_that_frees_the_lane_directly_wins_when_older():
    """Priority order decides between a direct leaf and a chain: the older goes."""
    # chain: parent lane 0 + child lane 1 (created first: older); then a lane-0 leaf
    cache, tokens, _ = ht.build_tree(4, [(-1, 0, 1, 0), (0, 1, 1, 0), (-1, 0, 1, 0)])
    leaf = ht.hc.path_nodes(cache, tokens[2])[-1][0]
    parent, child = [x for x, _ in ht.hc.path_nodes(cache, tokens[1])]
    plan, _ = plan_for(cache, [1, 0, 0, 0], 4)
    assert plan.leaves == [child, parent]  # the chain is older than the leaf
    # touch the chain: now the direct leaf is the older one and is taken alone
    cache.match_prefix(ht.hc.MatchPrefixParams(key=ht.hc.key_of(tokens[1])))
    plan, _ = plan_for(cache, [1, 0, 0, 0], 4)
    assert plan.leaves == [leaf]


def test_deep_chain_of_useless_nodes():
    """Lane 0 only at the top of a three-node chain whose lower nodes free other lanes."""
    cache, tokens, _ = ht.build_tree(4, [(-1, 0, 1, 0), (0, 1, 1, 0), (1, 2, 2, 0)])
    nodes = [x for x, _ in ht.hc.path_nodes(cache, tokens[2])]
    assert len(nodes) == 3
    plan, work = plan_for(cache, [1, 0, 0, 0], 4)
    assert plan.leaves == nodes[::-1]
    check_against_oracles(cache, plan, work, [1, 0, 0, 0], 4)


# --------------------------------------------------------------------------- property tests

chains = st.lists(
    st.tuples(st.integers(-1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(0, 3)),
    min_size=1,
    max_size=7,
)


def property_case(data, n, specs, policy):
    touches = data.draw(st.lists(st.integers(0, 10), max_size=3), label="touches")
    locks = data.draw(st.lists(st.integers(0, 10), max_size=2), label="locks")
    cache, _, _ = ht.build_tree(n, specs, touches, locks, policy=policy)
    if len(ht.device_nodes(cache)) > 12:
        return None
    deficit = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n), label="deficit")
    if not any(deficit):
        return None
    plan, work = plan_for(cache, deficit, n)
    return check_against_oracles(cache, plan, work, deficit, n)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from([2, 3, 4]), specs=chains, policy=st.sampled_from(["lru", "lfu", "fifo", "mru"]),
       data=st.data())
def test_planner_never_refuses_a_coverable_deficit_and_stays_within_its_bound(n, specs, policy, data):
    property_case(data, n, specs, policy)


@pytest.mark.ci_slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from([2, 3, 4]), specs=chains, policy=st.sampled_from(["lru", "lfu", "fifo", "mru"]),
       data=st.data())
def test_planner_bound_ci_slow(n, specs, policy, data):
    property_case(data, n, specs, policy)
