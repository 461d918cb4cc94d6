"""cp-hicache-owner-lanes on sglang 0.5.23: a hypothesis state machine over upstream's real UnifiedRadixCache,
HybridCacheController, PageInterleavePoolAllocator, host pool and transfer engine (CPU; stand-ins named in this
folder's hicache_cpu_standins.py), with the load-back gate and the capacity hook over upstream's functions.

Invariant: every load-back and capacity call is checked against brute-force oracles read from the device indices
(never refuses a coverable load, refuses only with nothing evicted, evicts only units holding a short lane);
after every step the leaf index yields upstream's evictable leaves in priority order and pages are conserved.
The gate is installed as SGLang's HookRegistry installs an AROUND hook (conftest.py); with
``SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes`` it is not and the machine fails (failing-first evidence).
Cost: the folder's longest test (300 examples of up to 40 steps: about half a minute on the CPU).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import evicted_segment
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.patches.cp_hicache_owner_lanes.unified.load_back_oracles import loaded_lanes, upstream_need


@pytest.fixture(scope="module", autouse=True)
def hook(gate_hook):
    """The load-back hook (conftest.py's ``gate_hook``) for every test here."""


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
