"""cp-hicache-owner-lanes on sglang 0.5.23: what the load-back gate evicts when lanes are short, and what it
counts and logs, on upstream's real UnifiedRadixCache, HybridCacheController, PageInterleavePoolAllocator, host
pool and transfer engine (CPU; stand-ins named in this folder's hicache_cpu_standins.py).

Only units holding a short lane go (LRU or MRU order, write-through or write-back with upstream's deferred
demote), a child before its parent; the leaf index survives ``reset()``; a slow plan and a refusal are counted
and logged; the gate's instance shadows are put back. Invariant: victims are checked against the device indices
(brute force), never against the planner. The hook is installed as SGLang's HookRegistry installs an AROUND hook
(conftest.py); with ``SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes`` it is not and the short-lane, reset and counting claims fail
(failing-first evidence). Cost: a few seconds (one harness per case).
"""

from __future__ import annotations

import pytest
import torch

from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.report import logger
from sglang_overlay.patches.cp_hicache_owner_lanes.unified import gate as gate_module
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.patches.cp_hicache_owner_lanes.unified.load_back_oracles import loaded_lanes, short_lane_2


@pytest.fixture(scope="module", autouse=True)
def hook(gate_hook):
    """The load-back hook (conftest.py's ``gate_hook``) for every test here."""


@pytest.mark.parametrize("policy,eviction", [("write_through", "lru"), ("write_back", "lru"), ("write_through", "mru")])
def test_short_lane_evicts_only_units_holding_it(policy, eviction):
    """Lane 2 short by one page: one lane-2 leaf goes (the LRU one; under MRU, a non-monotone
    policy planned without the leaf index, the newer one), nothing of lanes 0, 1, 3.
    On write-back the victim is backed up first (upstream's deferred demote) and stays on host."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    h = Harness(write_policy=policy, eviction_policy=eviction)
    keys, _ = h.chain(0, 4)  # the load: one page in every lane
    if policy == "write_back":  # the only leaf: upstream's own eviction backs it up and demotes it
        assert h.cache.evict(EvictParams(num_tokens=len(keys))).num_tokens_evicted == len(keys)
        h.settle()
        node = h.host_node(keys)
    else:
        node = h.to_host(keys)
    lane2 = []
    for lane in (0, 1, 2, 3, 2, 0, 1, 3):
        k, idx = h.chain(lane, 1)
        if lane == 2:
            if not lane2:
                victim = k  # the older (LRU) lane-2 leaf
            lane2.append(idx)
    for lane, pages in enumerate(h.alloc.class_free_page_counts()):
        h.hold(lane, pages - (0 if lane == 2 else 1))
    assert h.alloc.class_free_page_counts() == [1, 1, 0, 1]
    ok, evicted = h.load(node)
    assert (ok, evicted) == (True, h.ps)
    assert loaded_lanes(h, [node]) == [1, 1, 1, 1]
    resident = [x.component_data[0].value for x in h.device_nodes()]
    gone, kept = (lane2[0], lane2[1]) if eviction == "lru" else (lane2[1], lane2[0])
    assert not any(torch.equal(gone, v) for v in resident)
    assert any(torch.equal(kept, v) for v in resident)
    assert len(resident) == 8  # the 7 other leaves and the loaded chain
    assert (state_of(h.cache).leaf_index(h.tree) is None) == (eviction == "mru")
    counters = counters_of(h.cache)
    assert counters.pages_evicted_per_lane == [0, 0, 1, 0] and counters.leaves_evicted == 1
    assert counters.warnings == {} and counters.load_backs == 1  # freed what it planned: nothing to report
    if policy == "write_back":
        assert h.match(victim).host_hit_length == h.ps  # backed up before it left the device


def test_leaf_index_survives_reset():
    """reset() rebinds upstream's leaf set: the next plan re-installs the index on the new set."""
    h = Harness()
    state = state_of(h.cache)
    for round_ in range(2):
        assert h.load(short_lane_2(h)) == (True, h.ps), round_
        assert h.tree.evictable_device_leaves is state._leaves
        while h.held:
            h.release(0)
        h.cache.reset()


def test_child_then_parent_chain():
    """The only lane-3 page sits in a parent whose child holds lane 0: both go, child first."""
    h = Harness()
    keys, _ = h.chain(3, 4)  # the load: lanes 3, 0, 1, 2
    node = h.to_host(keys)
    parent, _ = h.chain(3, 1)  # lane 3
    h.chain(3, 1, prefix=parent)  # its child: lane 0
    for lane, pages in enumerate(h.alloc.class_free_page_counts()):
        h.hold(lane, pages - (0 if lane == 3 else 1))
    assert h.alloc.class_free_page_counts() == [1, 1, 1, 0]
    assert h.load(node) == (True, 2 * h.ps)
    assert loaded_lanes(h, [node]) == [1, 1, 1, 1]


def test_slow_plan_and_refusal_are_counted(monkeypatch, caplog):
    """A plan slower than the knob warns once, with its duration (a fake clock in the gate: 5 ms against a
    2 ms knob); a refusal is counted and logged at debug level only."""
    import types

    monkeypatch.setenv("SGLANG_OVERLAY_OWNER_LANE_SLOW_PLAN_MS", "2")
    monkeypatch.setattr(gate_module, "time", types.SimpleNamespace(perf_counter=iter([10.0, 10.005]).__next__))
    h = Harness()
    keys, _ = h.chain(0, 3)  # needs lanes 0, 1, 2
    node = h.to_host(keys)
    h.chain(1, 3)
    h.hold(0, h.alloc.class_free_page_counts()[0])
    with caplog.at_level("DEBUG", logger=logger.name):
        assert h.load(node) == (False, 0)
    counters = counters_of(h.cache)
    assert counters.warnings == {"slow_plan": 1, "deficit_remains": 1} and counters.refused == 1
    mine = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == logger.name]
    assert mine == [
        (
            "WARNING",
            f"owner-lane load-back: node {node}, planning took 5.00 ms > 2.00 ms (1 nodes scanned); "
            "need=[1,1,1,0] free=[0,5,5,5] deficit=[1,0,0,0]",
        ),
        (
            "DEBUG",
            f"owner-lane load-back: node {node} refused, nothing evicted; need=[1,1,1,0] free=[0,5,5,5] uncovered=[1,0,0,0]",
        ),
    ]


def test_the_shadows_are_put_back_and_an_earlier_instance_attribute_survives():
    """After a gated load neither shadow stays on the instance; an instance attribute that was there
    before (another hook's, a test's) is what the gate reads and what is there afterwards."""
    h = Harness()
    keys, _ = h.chain(0, 3)
    node = h.to_host(keys)
    assert h.load(node)[0]
    assert "_component_available_size" not in vars(h.cache) and "evict_for_alloc" not in vars(h.cache)

    h = Harness()
    keys, _ = h.chain(0, 3)
    node = h.to_host(keys)
    reads = []
    real = h.cache._component_available_size

    def earlier_available(component_type):
        reads.append(component_type)
        return real(component_type)

    def earlier_evict(params, **kwargs):
        raise AssertionError("the gate decided: upstream's eviction must not run")

    vars(h.cache).update(_component_available_size=earlier_available, evict_for_alloc=earlier_evict)
    assert h.load(node)[0]
    assert vars(h.cache)["_component_available_size"] is earlier_available and reads
    assert vars(h.cache)["evict_for_alloc"] is earlier_evict
