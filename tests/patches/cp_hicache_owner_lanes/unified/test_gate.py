"""cp-hicache-owner-lanes on sglang 0.5.23: the load-back hook on upstream's real
UnifiedRadixCache, HybridCacheController, PageInterleavePoolAllocator, host pool and
transfer engine (CPU; stand-ins named in this folder's hicache_cpu.py).

Collected only where the installed sglang is in unified/'s Release range (tests/conftest.py: release folders). The hook is installed on
``UnifiedRadixCache._load_back_transfers`` the way SGLang's HookRegistry installs an
AROUND hook (``hook(original, self, *args, **kwargs)``; in the source form the sources carry it); with
``SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes`` it is not, which is how the
failing-first evidence is produced (the upstream halves still pass, the patched halves fail).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.report import logger
from sglang_overlay.patches.cp_hicache_owner_lanes.unified import gate as gate_module
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.gate import load_back_transfers_hook
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import evicted_segment, plan_load_back
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.support.hicache_tensor_count import count_tensor_work
from tests.support.hooked import around


@pytest.fixture(scope="module", autouse=True)
def hook():
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    with around(UnifiedRadixCache, "_load_back_transfers", load_back_transfers_hook, "cp-hicache-owner-lanes"):
        yield


def class_counts(start, pages, n):
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    return PageInterleavePoolAllocator._class_counts(start % n, pages, n)


def upstream_need(h, node_id):
    """Upstream's own per-lane draw for a load: alloc_cyclic from the first host page's owner."""
    host = h.load_spec(node_id).host_indices
    return class_counts(int(host[0]) // h.ps, len(host) // h.ps, h.n)


def loaded_lanes(h, node_ids):
    """Brute force: pages per lane of the device indices the load actually allocated."""
    nodes = [h.tree.node_by_id(i) for i in node_ids]
    return h.lanes_of(torch.cat([x.component_data[0].value for x in nodes]))


# --------------------------------------------------------------------------- scenarios A and B


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
        keys, _ = h.chain(0, 4)
        node = h.to_host(keys)
        for lane in (0, 1, 2, 3, 2):
            h.chain(lane, 1)
        for lane, pages in enumerate(h.alloc.class_free_page_counts()):
            h.hold(lane, pages - (0 if lane == 2 else 1))
        assert h.load(node) == (True, h.ps), round_
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
    assert counters.last_plan_ms == pytest.approx(5.0, abs=1e-9)
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


# --------------------------------------------------------------------------- need oracle, tensor work


@pytest.mark.parametrize("n,ps", [(4, 4), (2, 2), (3, 2)])
def test_lane_need_matches_allocated_indices(n, ps):
    h = Harness(n=n, ps=ps, pages_per_rank=12)
    h.cache.load_back_threshold = 1
    state = state_of(h.cache)
    cases = []
    for base, pages in ((0, 1), (1, 3), (n - 1, 5), (2 % n, 2)):
        keys, _ = h.chain(base, pages)
        cases.append(h.to_host(keys))
    # a host suffix under a resident prefix: its phase is the base plus the prefix's pages
    prefix, _ = h.chain(1, 3)
    keys, _ = h.chain(1, 2, prefix=prefix)
    cases.append(h.to_host(keys, levels=1))
    # a two-node host segment
    prefix, _ = h.chain(2 % n, 1)
    keys, _ = h.chain(2 % n, 3, prefix=prefix)
    cases.append(h.to_host(keys))
    for node in cases:
        segment = evicted_segment(h.tree, node)
        tokens, need, _free, _plan = plan_load_back(h.cache, state, node)
        assert tokens == sum(len(x.key) for x in segment)
        assert need == upstream_need(h, node)
        assert h.load(node)[0]
        assert loaded_lanes(h, [x.id for x in segment]) == need
        for x in segment:  # upstream's rotation phase is what the planner reads per node
            assert h.tree.rotation_phase_of(x.id) % n == int(x.component_data[0].value[0]) // ps % n


def busy(h, short_lane, leaves=40, seed=3):
    """Many evictable one- and two-page chains, some with children; ``short_lane`` drained."""
    import random

    rng = random.Random(seed)
    keys, _ = h.chain(short_lane, h.n)  # the load: one page in every lane
    target = h.to_host(keys)
    placed = []
    for _ in range(leaves):
        if placed and rng.random() < 0.3:
            pk, base = rng.choice(placed)
            k, idx = h.chain(base, 1, prefix=pk)
        else:
            base = rng.randrange(h.n)
            k, idx = h.chain(base, rng.randint(1, 2))
        if k is None:
            break
        placed.append((k, base))
    h.hold(short_lane, h.alloc.class_free_page_counts()[short_lane])
    return target


def test_planning_does_no_tensor_work():
    h = Harness(n=4, ps=4, pages_per_rank=24)
    target = busy(h, short_lane=2)
    state = state_of(h.cache)
    free = h.alloc.class_free_page_counts()
    free = [0] * len(free)  # every lane short: a long walk
    with count_tensor_work() as work:
        tokens, need, _, plan = plan_load_back(h.cache, state, target, free=free)
    assert plan.covered and len(plan.leaves) >= 2 and plan.scanned >= len(plan.leaves)
    assert work.total == 0, (work.function_calls[:5], work.aten_ops[:5])
    assert work.host_syncs == 0
    # the counter does see tensor-derived counting (so this test can fail)
    with count_tensor_work() as oracle:
        for view in plan.leaves:
            h.lanes_of(view.node.component_data[0].value)
    assert oracle.total > 0


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


# --------------------------------------------------------------------------- state machine


class LoadBackMachine(RuleBasedStateMachine):
    """Random chains, extensions, held pages, demotions, LRU evictions, load-backs and prefill/decode
    capacity evictions (the 0.5.23 capacity hook over upstream's function); every load-back and capacity
    call is checked against brute-force oracles read from the device indices."""

    @initialize(
        n=st.sampled_from([2, 4]),
        ps=st.sampled_from([2, 4]),
        pages_per_rank=st.integers(3, 6),
        policy=st.sampled_from(["write_through", "write_back"]),
    )
    def build(self, n, ps, pages_per_rank, policy):
        # write-back: demote() finds nothing backed up; host copies come from lru_evict and the planner
        self.h = Harness(n=n, ps=ps, pages_per_rank=pages_per_rank, layers=1, write_policy=policy)
        self.h.cache.load_back_threshold = 1
        event(f"policy {policy}")
        self.seqs = []  # (keys, rotation base)
        self.total_pages = n * pages_per_rank
        self.loads = 0

    @rule(base=st.integers(0, 7), pages=st.integers(1, 3))
    def new_chain(self, base, pages):
        keys, _ = self.h.chain(base % self.h.n, pages)
        if keys is not None:
            self.seqs.append((keys, base % self.h.n))

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 999), pages=st.integers(1, 2))
    def extend(self, i, pages):
        keys, base = self.seqs[i % len(self.seqs)]
        if self.h.match(keys).device_prefix_len != len(keys):
            return
        new, _ = self.h.chain(base, pages, prefix=keys)
        if new is not None:
            self.seqs.append((new, base))

    @rule(base=st.integers(0, 7), pages=st.integers(1, 2))
    def fill(self, base, pages):
        """New chains until the lanes run short (evictable pressure)."""
        for k in range(4 * self.h.n):
            keys, _ = self.h.chain((base + k) % self.h.n, pages)
            if keys is None:
                break
            self.seqs.append((keys, (base + k) % self.h.n))

    @rule(lane=st.integers(0, 7))
    def drain(self, lane):
        """Running requests take every free page of one lane."""
        lane %= self.h.n
        self.h.hold(lane, self.h.alloc.class_free_page_counts()[lane])

    @rule(lane=st.integers(0, 7), pages=st.integers(1, 2))
    def hold(self, lane, pages):
        lane %= self.h.n
        pages = min(pages, self.h.alloc.class_free_page_counts()[lane])
        self.h.hold(lane, pages)

    @precondition(lambda self: self.h.held)
    @rule(i=st.integers(0, 999))
    def release(self, i):
        self.h.release(i % len(self.h.held))

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 999), levels=st.integers(1, 2))
    def demote(self, i, levels):
        keys, _ = self.seqs[i % len(self.seqs)]
        m = self.h.match(keys)
        if m.device_prefix_len:
            self.h.to_host(keys[: m.device_prefix_len], levels=levels)

    @rule(pages=st.integers(1, 4))
    def lru_evict(self, pages):
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        self.h.cache.evict(EvictParams(num_tokens=pages * self.h.ps))
        self.h.settle()

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 999))
    def load(self, i):
        h = self.h
        keys, _ = self.seqs[i % len(self.seqs)]
        m = h.match(keys)
        if m.host_hit_length == 0:
            return
        node = m.best_match_node
        need = upstream_need(h, node)
        free = h.alloc.class_free_page_counts()
        deficit = [max(0, a - b) for a, b in zip(need, free)]
        path = set(h.path_nodes(node))
        before = {x: h.lanes_of(x.component_data[0].value) for x in h.device_nodes()}
        supply = [0] * h.n
        for x, lanes in before.items():
            if x not in path:
                supply = [s + c for s, c in zip(supply, lanes)]
        coverable = all(d <= s for d, s in zip(deficit, supply))
        segment = [x.id for x in evicted_segment(h.tree, node)]

        ok, _ = h.load(node)
        after = set(h.device_nodes())
        evicted = [x for x in before if x not in after]
        self.loads += 1
        event(
            f"{h.cc.write_policy} load: {'loaded' if ok else 'refused'}, deficit={'yes' if any(deficit) else 'no'}, "
            f"evicted={'yes' if evicted else 'no'}"
        )
        assert ok == coverable, (need, free, supply)  # never refuses a coverable load
        if not ok:
            assert not evicted  # refuses only with nothing evicted
            return
        assert loaded_lanes(h, segment) == need
        if not any(deficit):
            assert not evicted
        gone = set(evicted)
        for x in evicted:  # every evicted node is, or hangs under, an evicted unit holding a short lane
            y = x
            while y in gone and not any(c and deficit[lane] for lane, c in enumerate(before[y])):
                y = y.parent
            assert y in gone, f"evicted node {x.id} frees no short lane {deficit} (lanes {before[x]})"

    @rule(pages=st.integers(1, 3))
    def capacity(self, pages):
        """``evict_to_free_tokens`` for ``pages`` per lane: admitted exactly when the device nodes could
        cover every lane's deficit; nothing evicted without a deficit; every evicted node is, or hangs
        under, an evicted unit holding a page of a short lane."""
        from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator

        from sglang_overlay.patches.cp_hicache_owner_lanes.unified import capacity as cap

        h = self.h
        upstream = BaseTokenToKVPoolAllocator.__dict__["evict_to_free_tokens"]
        upstream = getattr(upstream, "__wrapped__", upstream)
        num_tokens = pages * h.n * h.ps
        deficit = [max(0, pages - f) for f in h.alloc.class_free_page_counts()]
        before = {x: h.lanes_of(x.component_data[0].value) for x in h.device_nodes()}
        supply = [sum(lanes[c] for lanes in before.values()) for c in range(h.n)]
        coverable = all(d <= s for d, s in zip(deficit, supply))
        cap.evict_to_free_tokens_hook(upstream, h.alloc, h.cache, num_tokens)
        h.settle()
        admitted = h.alloc.available_size() >= num_tokens
        evicted = [x for x in before if x not in set(h.device_nodes())]
        event(
            f"{h.cc.write_policy} capacity: {'admitted' if admitted else 'short'}, "
            f"deficit={'yes' if any(deficit) else 'no'}, evicted={'yes' if evicted else 'no'}"
        )
        assert admitted == coverable, (deficit, supply)
        if not any(deficit):
            assert not evicted
        if not coverable:
            return  # upstream's own eviction ran (the plan cannot cover): upstream's victims
        gone = set(evicted)
        for x in evicted:
            y = x
            while y in gone and not any(c and deficit[lane] for lane, c in enumerate(before[y])):
                y = y.parent
            assert y in gone, f"evicted node {x.id} frees no short lane {deficit} (lanes {before[x]})"

    @invariant()
    def leaf_index_in_upstream_order(self):
        """The lazy heap yields exactly upstream's evictable leaves, in priority order
        (so NotifyingLeafSet sees every leaf upstream adds)."""
        state = state_of(self.h.cache) if hasattr(self, "h") else None
        index = state and state._index
        if index is None or state._leaves is not self.h.tree.evictable_device_leaves:
            return
        popped = []
        walked = list(index.ordered(popped))
        index.restore(popped)
        leaves = self.h.tree.evictable_device_leaves
        assert sorted(walked, key=id) == sorted(leaves, key=id)
        prios = [state.priority(x) for x in walked]
        assert prios == sorted(prios)

    @invariant()
    def pages_conserved(self):
        if not hasattr(self, "h"):
            return
        h = self.h
        h.alloc.debug_check_classes()
        resident = sum(len(x.component_data[0].value) for x in h.device_nodes()) // h.ps
        held = sum(len(t) for t in h.held) // h.ps
        assert resident + held + sum(h.alloc.class_free_page_counts()) == self.total_pages
        for x in h.device_nodes():
            assert h.tree.rotation_phase_of(x.id) % h.n == int(x.component_data[0].value[0]) // h.ps % h.n


LoadBackMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLoadBackMachine = LoadBackMachine.TestCase


# --------------------------------------------------------------------------- the shadows, the need's edges


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


def test_lane_need_of_nothing_to_load_is_zero_in_every_lane():
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import lane_need
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.tree_view import TreeView

    h = Harness(n=3, ps=2)
    state = state_of(h.cache)
    assert lane_need(TreeView(h.tree, state.priority, 3, 2), []) == (0, [0, 0, 0])
