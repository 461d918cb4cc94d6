"""cp-hicache-owner-lanes on sglang 0.5.23: the load-back gate's outcomes against upstream's on the same trees,
on the real UnifiedRadixCache, HybridCacheController, PageInterleavePoolAllocator, host pool and transfer engine
(CPU; stand-ins named in this folder's hicache_cpu_standins.py): the probe's scenarios A and B load with nothing
evicted where upstream evicts 24 and 28 tokens, an uncoverable deficit is refused with nothing evicted where
upstream empties the tree first, and a plain paged allocator keeps upstream's path.

Invariant: each scenario is built twice the same way; upstream's half bypasses the hook (``use_upstream``). The
hook is installed as SGLang's HookRegistry installs an AROUND hook (conftest.py); with
``SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes`` it is not, which is how the failing-first evidence is produced
(the upstream halves still pass, the patched halves fail). Cost: a few seconds (two harnesses per test).
"""

from __future__ import annotations

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.report import logger
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.patches.cp_hicache_owner_lanes.unified.load_back_oracles import loaded_lanes, upstream_need


@pytest.fixture(scope="module", autouse=True)
def hook(gate_hook):
    """The load-back hook (conftest.py's ``gate_hook``) for every test here."""


def scenario_a(h):
    """Lane 0 drained by running requests, nothing of lane 0 evictable; the load
    (3 pages from lane 1: lanes 1, 2, 3) never touches lane 0."""
    keys, _ = h.chain(1, 3)
    node = h.to_host(keys)
    for _ in range(2):
        h.chain(1, 3)
    h.hold(0, h.alloc.class_free_page_counts()[0])
    assert h.alloc.class_free_page_counts() == [0, 4, 4, 4] and h.alloc.available_size() == 0
    return node


def scenario_b(h):
    """As A, plus one evictable lane-0 page as the most recently used leaf."""
    keys, _ = h.chain(1, 3)
    node = h.to_host(keys)
    for _ in range(2):
        h.chain(1, 3)
    h.chain(0, 1)
    h.hold(0, h.alloc.class_free_page_counts()[0])
    assert h.alloc.class_free_page_counts() == [0, 4, 4, 4] and h.cache.full_evictable_size() == 28
    return node


def test_scenario_a_loads_with_nothing_evicted():
    up = Harness()
    node = scenario_a(up)
    up.use_upstream()
    assert up.load(node) == (False, 24)  # upstream: empties the evictable tree, then refuses
    assert up.cache.full_evictable_size() == 0

    h = Harness()
    node = scenario_a(h)
    need = upstream_need(h, node)
    assert need == [0, 1, 1, 1]
    assert h.load(node) == (True, 0)
    assert h.cache.full_evictable_size() == 24 + 12
    assert loaded_lanes(h, [node]) == need


def test_scenario_b_loads_with_nothing_evicted(caplog):
    up = Harness()
    node = scenario_b(up)
    up.use_upstream()
    assert up.load(node) == (True, 28)  # upstream: evicts all 7 evictable pages for a load that needed none

    h = Harness()
    node = scenario_b(h)
    with caplog.at_level("DEBUG", logger=logger.name):
        assert h.load(node) == (True, 0)
    assert not caplog.records  # the hot path logs nothing
    assert loaded_lanes(h, [node]) == [0, 1, 1, 1]
    counters = counters_of(h.cache)
    assert counters.load_backs == 1 and counters.refused == 0 and counters.leaves_evicted == 0


def test_uncoverable_deficit_refuses_with_nothing_evicted():
    def build():
        h = Harness()
        keys, _ = h.chain(0, 3)  # the load needs lanes 0, 1, 2
        node = h.to_host(keys)
        for lane in (1, 2, 3, 1, 2, 3):
            h.chain(lane, 1)
        h.hold(0, h.alloc.class_free_page_counts()[0])
        return h, node

    up, node = build()
    up.use_upstream()
    evictable = up.cache.full_evictable_size()
    assert up.load(node) == (False, evictable)  # upstream empties the tree and still refuses

    h, node = build()
    before = (h.alloc.class_free_page_counts(), h.cache.full_evictable_size(), h.cache.full_protected_size())
    assert h.load(node) == (False, 0)
    after = (h.alloc.class_free_page_counts(), h.cache.full_evictable_size(), h.cache.full_protected_size())
    assert after == before  # nothing evicted, every lock taken for the load released
    top = h.tree.node_by_id(node)
    assert top.evicted and top.component_data[0].host_lock_ref == 0 and top.component_data[0].lock_ref == 0
    counters = counters_of(h.cache)
    assert counters.refused == 1 and counters.leaves_evicted == 0


def test_inert_without_interleaved_allocator():
    def run(upstream):
        h = Harness(interleaved=False, pages_per_rank=4)
        if upstream:
            h.use_upstream()
        keys, _ = h.chain(None, 4)
        node = h.to_host(keys)
        while h.chain(None, 1)[0] is not None:
            pass
        ok, evicted = h.load(node)
        return h, (ok, evicted, h.alloc.available_size(), h.cache.full_evictable_size())

    up, expected = run(upstream=True)
    h, got = run(upstream=False)
    assert got == expected and expected[0] and expected[1] > 0
    assert state_of(h.cache) is None and counters_of(h.cache) is None
