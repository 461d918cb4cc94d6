"""The owner-lane planner against exact oracles on random stand-in trees (hypothesis), on every pin.

Trees are ``tests/support/plain_tree.py`` (a STAND-IN: plain nodes under HiRadixCache's leaf, lock and access
rules, upstream's eviction strategies); no release's cache class is built.
Oracles are exact (``tests/support/hicache_trees.py``). Invariant: the planner never refuses a coverable
deficit, plans a closed eviction order of needed units and stays within D * (M - 1) pages of the optimum.
Cost: 150 examples in the default tier, 600 more under ``ci_slow`` (trees of at most 12 device nodes).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.patches.cp_hicache_owner_lanes.planner_trees import plan_for
from tests.support import hicache_trees as ht
from tests.support import plain_tree as pt

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
