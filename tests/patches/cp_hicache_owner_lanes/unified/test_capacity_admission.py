"""cp-hicache-owner-lanes on sglang 0.5.23: prefill/decode capacity eviction per owner lane admits what
upstream admits and evicts only what short lanes need, on upstream's real ``PageInterleavePoolAllocator
.evict_to_free_tokens`` (inherited from ``BaseTokenToKVPoolAllocator``), ``check_decode_capacity``,
``UnifiedRadixCache`` and its HiCache controller (CPU; stand-ins named in this folder's hicache_cpu_standins.py).

Invariant: every scenario is built twice, the same way (capacity_runs.py): one copy goes through the hook, the
other through upstream's original function (the comparison the patch's claims rest on); a hypothesis property
over random trees checks the same admission and never more evicted. With
``SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes`` the hook is not installed and the patched halves fail
(failing-first evidence). Cost: seconds (the property's 25 random trees, each built twice: about 4 s).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from tests.patches.cp_hicache_owner_lanes.unified.capacity_runs import busy, lane0_newest, run_both
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness


@pytest.fixture(scope="module", autouse=True)
def hook(capacity_hook):
    """The capacity hook (conftest.py's ``capacity_hook``) for every test here."""


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_prefill_capacity_evicts_only_the_short_lane(policy):
    """One page per lane needed (N x ps tokens): upstream evicts all seven leaves to raise lane 0,
    the hook evicts the one lane-0 leaf; both admit. On write-back the victim is backed up first and
    stays on host (upstream's deferred demote), as upstream's own eviction does with its victims."""
    n_tokens = 4 * 4
    theirs, mine, h = run_both(lambda: lane0_newest(policy), n_tokens)
    assert theirs["admitted"] and theirs["evicted"] == 28 and theirs["evictable"] == 0
    assert mine["admitted"] and mine["evicted"] == 4 and mine["evictable"] == 24
    assert mine["free"][1:] == [f - 2 for f in theirs["free"][1:]]  # lanes 1-3 keep their two leaves each
    counters = counters_of(h.cache)
    assert counters.capacity_plans == 1 and counters.capacity_fallbacks == 0 and counters.warnings == {}
    assert counters.pages_evicted_per_lane == [1, 0, 0, 0] and counters.leaves_evicted == 1
    if policy == "write_back":
        host_only = [x for x in h.tree.root_node.children.values() if x.evicted]
        assert len(host_only) == 1 and host_only[0].backuped  # the victim kept its KV on host


def test_decode_capacity_check_goes_through_the_hook():
    """``check_decode_capacity``, upstream's decode/retract entry, reaches the owner-lane path."""

    def decode(h):
        assert h.alloc.check_decode_capacity(num_tokens=16, tree_cache=h.cache)

    theirs, mine, _ = run_both(lane0_newest, 16, call=decode)
    assert theirs["admitted"] and mine["admitted"]
    assert (theirs["evicted"], mine["evicted"]) == (28, 4)


def test_child_then_parent_chain_frees_a_lane_page_held_by_an_interior_node():
    """Lane 0's only evictable page is the parent of a lane-1 leaf: the chain goes, nothing else."""

    def build():
        h = Harness()
        for lane in (2, 3, 2, 3):
            h.chain(lane, 1)
        keys, _ = h.chain(0, 1)
        h.chain(0, 1, prefix=keys)  # child: position-page 1 of a base-0 chain is lane 1
        h.hold(0, h.alloc.class_free_page_counts()[0])
        return h

    theirs, mine, _ = run_both(build, 16)
    assert theirs["admitted"] and mine["admitted"]
    assert mine["evicted"] == 8 and theirs["evicted"] == 24  # the chain's two pages; upstream: everything


def test_uncovered_deficit_is_upstreams_call():
    """No evictable page of lane 0: the plan cannot cover it, so upstream's own eviction runs
    (it empties the tree and still does not admit) and the state matches upstream's exactly."""

    def build():
        h = Harness()
        for lane in (1, 2, 3, 1):
            h.chain(lane, 1)
        h.hold(0, h.alloc.class_free_page_counts()[0])
        return h

    theirs, mine, h = run_both(build, 16)
    assert mine == theirs and not theirs["admitted"] and theirs["evictable"] == 0
    counters = counters_of(h.cache)
    assert counters.capacity_fallbacks == 1 and counters.capacity_plans == 0 and counters.leaves_evicted == 0


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    seed=st.integers(0, 10_000),
    short=st.sets(st.integers(0, 3), min_size=1, max_size=3),
    pages_per_lane=st.integers(1, 12),
)
def test_same_admission_as_upstream_and_never_more_evicted(seed, short, pages_per_lane):
    """On random trees: the gate's outcome is upstream's, the hook evicts at most what upstream evicts,
    and a deficit it plans leaves every lane that was not short exactly as upstream's walk would at most."""
    n_tokens = pages_per_lane * 4 * 4
    theirs, mine, h = run_both(lambda: busy(random.Random(seed), sorted(short)), n_tokens)
    assert mine["admitted"] == theirs["admitted"]
    assert mine["evicted"] <= theirs["evicted"]
    counters = counters_of(h.cache)
    if counters.capacity_plans:
        assert mine["admitted"]
        assert all(m <= t for m, t in zip(mine["free"], theirs["free"]))  # never freed a lane beyond upstream
