"""The planner on upstream's real HiRadixCache trees, and the stand-in tree held to them.

Trees are upstream's real HiRadixCache over a real PageInterleavePoolAllocator
(tests/support/hicache_trees.py). The planner's semantics are tested on every pin on the
stand-in (``tests/support/plain_tree.py``, ``../test_planner_*.py``); here, on the release whose
class the stand-in copies, each spec is grown on both: the stand-in must hold the same nodes,
metadata, locks and evictable leaves, in the same priority order, and the planner must plan the
same nodes on both, with no tensor work on the real cache and every oracle property
(``hicache_trees.check_against_oracles``) holding on the real tree.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sglang_overlay
from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, plan_owner_lane_eviction
from tests.support import hicache_trees as ht
from tests.support import plain_tree as pt
from tests.support.hicache_tensor_count import count_tensor_work


@pytest.fixture(scope="module", autouse=True)
def overlay():
    sglang_overlay.apply()


def plan_real(cache, deficit, n):
    state = state_of(cache)
    with count_tensor_work() as work:
        plan = plan_owner_lane_eviction(cache, list(deficit), [0] * n, state.index, n)
    finish_plan(plan)
    return plan, work


def plan_plain(tree, deficit, n):
    plan = plan_owner_lane_eviction(tree, list(deficit), [0] * n, tree.index, n)
    finish_plan(plan)
    return plan


def assert_same_tree(cache, tree):
    """The stand-in holds what the real cache holds, leaf for leaf, in the same priority order."""
    real = {ht.path_key(x): x for x in ht.all_nodes(cache)}
    plain = {ht.path_key(x): x for x in ht.all_nodes(tree)}
    assert sorted(real) == sorted(plain)
    for key, x in real.items():
        y = plain[key]
        assert md.get(x) == md.get(y), key
        assert (x.lock_ref, x.value is None) == (y.lock_ref, y.value is None), key
    assert sorted(map(ht.path_key, cache.evictable_leaves)) == sorted(map(ht.path_key, tree.evictable_leaves))
    by_real = sorted(cache.evictable_leaves, key=cache.eviction_strategy.get_priority)
    by_plain = sorted(tree.evictable_leaves, key=tree.eviction_strategy.get_priority)
    assert list(map(ht.path_key, by_real)) == list(map(ht.path_key, by_plain))


@pytest.mark.parametrize(
    "specs, deficit",
    [
        ([(-1, 0, 1, 0), (0, 1, 1, 0)], [1, 0, 0, 0]),  # a lane page behind a useless child
        ([(-1, 0, 1, 0), (0, 1, 1, 0), (-1, 0, 1, 0)], [1, 0, 0, 0]),  # an older chain before a direct leaf
        ([(-1, 0, 1, 0), (0, 1, 1, 0), (1, 2, 2, 0)], [1, 0, 0, 0]),  # a deep chain of useless nodes
    ],
)
@pytest.mark.parametrize("policy", ["lru", "mru"])
def test_the_chain_cases_plan_alike_on_the_real_cache_and_the_stand_in(specs, deficit, policy):
    cache, tokens, _ = ht.build_tree(4, specs, policy=policy)
    tree, pages, _ = pt.build_tree(4, specs, policy=policy)
    assert tokens == pages
    assert_same_tree(cache, tree)
    plan, work = plan_real(cache, deficit, 4)
    assert plan.covered
    assert list(map(ht.path_key, plan.leaves)) == list(map(ht.path_key, plan_plain(tree, deficit, 4).leaves))
    ht.check_against_oracles(cache, plan, deficit, 4, work)


# --------------------------------------------------------------------------- property tests

chains = st.lists(
    st.tuples(st.integers(-1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(0, 3)),
    min_size=1,
    max_size=7,
)


def property_case(data, n, specs, policy):
    touches = data.draw(st.lists(st.integers(0, 10), max_size=3), label="touches")
    locks = data.draw(st.lists(st.integers(0, 10), max_size=2), label="locks")
    cache, tokens, _ = ht.build_tree(n, specs, touches, locks, policy=policy)
    if len(ht.device_nodes(cache)) > 12:
        return None
    tree, pages, _ = pt.build_tree(n, specs, touches, locks, policy=policy)
    assert tokens == pages
    assert_same_tree(cache, tree)
    deficit = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n), label="deficit")
    if not any(deficit):
        return None
    plan, work = plan_real(cache, deficit, n)
    plain = plan_plain(tree, deficit, n)
    assert list(map(ht.path_key, plan.leaves)) == list(map(ht.path_key, plain.leaves))
    assert (plan.remaining, plan.pages_per_lane, plan.scanned) == (plain.remaining, plain.pages_per_lane, plain.scanned)
    return ht.check_against_oracles(cache, plan, deficit, n, work)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.sampled_from([2, 3, 4]), specs=chains, policy=st.sampled_from(["lru", "lfu", "fifo", "mru"]), data=st.data()
)
def test_planner_never_refuses_a_coverable_deficit_and_stays_within_its_bound(n, specs, policy, data):
    property_case(data, n, specs, policy)


@pytest.mark.ci_slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.sampled_from([2, 3, 4]), specs=chains, policy=st.sampled_from(["lru", "lfu", "fifo", "mru"]), data=st.data()
)
def test_planner_bound_ci_slow(n, specs, policy, data):
    property_case(data, n, specs, policy)
