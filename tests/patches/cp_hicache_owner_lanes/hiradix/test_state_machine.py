"""Randomized insert / match / lock / unlock / evict / load-back / split sequences on
upstream's HiRadixCache under page-owner residency, invariants checked after every step."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import sglang_overlay
from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc

PROMPTS = [[(p + 1) * 1_000_000 + i for i in range(64)] for p in range(3)]
SUFFIXES = [[(s + 1) * 10_000 + 500_000_000 + i for i in range(64)] for s in range(6)]


class OwnerLaneMachine(RuleBasedStateMachine):
    @initialize(
        n=st.sampled_from([2, 4, 8]),
        ps=st.sampled_from([1, 4]),
        policy=st.sampled_from(["write_through", "write_back"]),
        pages_per_rank=st.integers(3, 7),
    )
    def build(self, n, ps, policy, pages_per_rank):
        sglang_overlay.apply()
        self.n, self.ps = n, ps
        self.total_pages = n * pages_per_rank
        self.cache = hc.build_cpu_hicache(n, ps, pages_per_rank, write_policy=policy, layers=1, heads=1, head_dim=2)
        # Load back chains of any length (upstream skips < 10 tokens, which
        # would hide most of the short chains used here).
        self.cache.load_back_threshold = 1
        # upstream's allocator self-checks: owner congruence of every extension's
        # rotation base (read from the patch's metadata) and unique, classed pages
        self.cache.token_to_kv_pool_allocator.debug_mode = True
        self.locked = []
        self.seqs = []

    def _tokens(self, p, lp, s, ls):
        ps = self.ps
        toks = PROMPTS[p][: lp * ps] + SUFFIXES[s][: ls * ps]
        return toks[: len(toks) // ps * ps]

    @rule(p=st.integers(0, 2), lp=st.integers(1, 6), s=st.integers(0, 5), ls=st.integers(0, 6))
    def insert(self, p, lp, s, ls):
        toks = self._tokens(p, lp, s, ls)
        if hc.prefill(self.cache, toks) is not None:
            self.seqs.append(toks)

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 10_000), cut=st.integers(1, 30))
    def match_split(self, i, cut):
        toks = self.seqs[i % len(self.seqs)]
        cut = min(len(toks), cut * self.ps)
        self.cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(toks[:cut])))

    @rule(i=st.integers(0, 10_000))
    def lock(self, i):
        resident = sorted((x for x in hc.all_nodes(self.cache) if not x.evicted), key=lambda x: x.id)
        if resident:
            node = resident[i % len(resident)]
            self.cache.inc_lock_ref(node)
            self.locked.append(node)

    @precondition(lambda self: self.locked)
    @rule(i=st.integers(0, 10_000))
    def unlock(self, i):
        node = self.locked.pop(i % len(self.locked))
        self.cache.dec_lock_ref(node)

    @rule(tokens=st.integers(1, 40))
    def evict(self, tokens):
        self.cache.evict(hc.EvictParams(num_tokens=tokens * self.ps))
        hc.settle(self.cache)

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 10_000))
    def load_back(self, i):
        toks = self.seqs[i % len(self.seqs)]
        match = self.cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(toks)))
        node = match.best_match_node
        if node.evicted:
            indices, _ = self.cache.init_load_back(
                hc.InitLoadBackParams(best_match_node=node, host_hit_length=match.host_hit_length)
            )
            hc.settle(self.cache)
            if len(indices):
                assert not node.evicted

    # ------------------------------------------------------------------ invariants

    @invariant()
    def consistent(self):
        if not hasattr(self, "cache"):
            return
        cache, n, ps = self.cache, self.n, self.ps
        alloc = cache.token_to_kv_pool_allocator
        alloc.debug_check_classes()
        free = set(int(x) for x in alloc.get_all_free_pages())
        referenced = []
        evictable = protected = 0

        def depth_tokens(node):
            d = 0
            node = node.parent
            while node is not cache.root_node:
                d += len(node.key)
                node = node.parent
            return d

        for node in hc.all_nodes(cache):
            assert node.lock_ref >= 0 and node.host_ref_counter == 0
            meta = md.get(node)
            assert meta is not None, f"node {node.id} has no owner metadata"
            assert meta.num_pages == len(node.key) // ps
            assert meta.start_page == depth_tokens(node) // ps
            if node.evicted:
                assert node.backuped
                continue
            if node.lock_ref:
                protected += len(node.key)
            else:
                evictable += len(node.key)
            pages = [int(x) // ps for x in node.value[::ps]]
            referenced.extend(pages)
            assert meta.first_owner == hc.oracle_first_owner(node, n, ps)
            assert meta.owner_counts() == hc.oracle_owner_counts(node, n, ps)
            assert hc.rows_match(cache, node.value, list(node.key.token_ids))
            parent = node.parent
            if parent is not cache.root_node and parent.value is not None:
                # one rotation per chain, read from the real pages (not from the metadata)
                last_owner = int(parent.value[-ps]) // ps % n
                assert hc.oracle_first_owner(node, n, ps) == (last_owner + 1) % n, "chain off its rotation"
        assert len(referenced) == len(set(referenced)), "a page is referenced twice"
        assert not free & set(referenced), "a page is both free and referenced"
        assert len(free) + len(referenced) == self.total_pages, "a page leaked"
        assert cache.evictable_size_ == evictable
        assert cache.protected_size_ == protected
        assert cache.root_node.lock_ref == 1


OwnerLaneMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestOwnerLaneMachine = OwnerLaneMachine.TestCase


@pytest.mark.slow
def test_owner_lane_machine_long():
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        OwnerLaneMachine,
        settings=settings(
            max_examples=300, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
        ),
    )


@pytest.mark.ci_slow
def test_owner_lane_machine_ci():
    """CI's reduced slow tier: more and longer runs than the default tier, far fewer than -m slow."""
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        OwnerLaneMachine,
        settings=settings(
            max_examples=100,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
