"""cp-hicache-owner-lanes on sglang 0.5.23: prefill/decode capacity eviction per owner lane, on
upstream's real ``PageInterleavePoolAllocator.evict_to_free_tokens`` (inherited from
``BaseTokenToKVPoolAllocator``), ``check_decode_capacity``, ``UnifiedRadixCache`` and its HiCache
controller (CPU; stand-ins named in this folder's hicache_cpu.py).

Every scenario is built twice, the same way: one copy goes through the hook, the other through
upstream's original function (the comparison the patch's claims rest on). With
``SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes`` the hook is not installed and the patched halves
fail (failing-first evidence).
"""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.report import logger
from sglang_overlay.patches.cp_hicache_owner_lanes.unified import capacity as cap
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import plan_lanes
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.support.hicache_tensor_count import count_tensor_work
from tests.support.hooked import around


def _base_class():
    from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator

    return BaseTokenToKVPoolAllocator


def upstream_evict(h, num_tokens):
    """Upstream's own ``evict_to_free_tokens`` on ``h``, bypassing any hook."""
    fn = _base_class().__dict__["evict_to_free_tokens"]
    return getattr(fn, "__wrapped__", fn)(h.alloc, h.cache, num_tokens)


@pytest.fixture(scope="module", autouse=True)
def hook():
    with around(_base_class(), "evict_to_free_tokens", cap.evict_to_free_tokens_hook, "cp-hicache-owner-lanes"):
        yield


def outcome(h, num_tokens, evicted):
    free = h.alloc.class_free_page_counts() if h.interleaved else [h.alloc.available_size() // h.ps]
    return {
        "admitted": h.alloc.available_size() >= num_tokens,
        "evicted": evicted,
        "free": free,
        "evictable": h.cache.full_evictable_size(),
    }


def run_both(build, num_tokens, call=None):
    """``build`` twice; evict for ``num_tokens`` through upstream and through the hook. Returns
    (upstream's outcome, the hook's outcome, the hooked harness)."""
    call = call or (lambda h: h.alloc.evict_to_free_tokens(h.cache, num_tokens))
    results = []
    for through_hook in (False, True):
        h = build()
        before = h.evicted_tokens
        if through_hook:
            call(h)
        else:
            upstream_evict(h, num_tokens)
        results.append(outcome(h, num_tokens, h.evicted_tokens - before))
    return results[0], results[1], h


def lane0_newest(write_policy="write_through", ps=4):
    """Seven one-page leaves: lanes 1, 2, 3 twice (least recently used), then lane 0; lane 0 drained."""
    h = Harness(write_policy=write_policy, ps=ps)
    for lane in (1, 2, 3, 1, 2, 3, 0):
        h.chain(lane, 1)
    h.hold(0, h.alloc.class_free_page_counts()[0])
    assert h.alloc.class_free_page_counts()[0] == 0 and h.cache.full_evictable_size() == 7 * ps
    return h


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


def test_no_short_lane_evicts_nothing_and_reads_no_tensor():
    h = lane0_newest()
    h.release(0)  # one lane-0 page back: every lane has a free page
    state = state_of(h.cache)
    before = outcome(h, 16, 0)
    with count_tensor_work() as work:
        assert h.alloc.evict_to_free_tokens(h.cache, 16) is None
    assert outcome(h, 16, 0) == before and before["admitted"]
    assert work.aten_ops == [] and work.host_syncs == 0
    assert state.counters.capacity_plans == state.counters.capacity_fallbacks == 0


def test_planning_reads_no_tensor_on_a_busy_tree():
    h = busy(random.Random(5), short=(0, 2))
    state = state_of(h.cache)
    free = [0] * h.n  # every lane short by 2: a long walk
    with count_tensor_work() as work:
        plan = plan_lanes(h.cache, state, [2] * h.n, free)
    assert plan.scanned >= len(plan.leaves) >= 2
    assert work.total == 0 and work.host_syncs == 0


def test_plain_paged_allocator_keeps_upstreams_path():
    """A non-interleaved allocator (every other deployment) gets upstream's eviction unchanged."""

    def build():
        h = Harness(interleaved=False, pages_per_rank=3)
        while h.chain(None, 1)[0] is not None:
            pass
        return h

    theirs, mine, h = run_both(build, 16)
    assert mine == theirs and theirs["evicted"] > 0 and theirs["admitted"]
    assert cap._state(h.alloc, h.cache) is None and counters_of(h.cache) is None


def test_other_callers_and_arguments_pass_through():
    h = lane0_newest()
    calls = []

    def original(self, *args, **kwargs):
        calls.append((self, args, kwargs))
        return "upstream"

    assert cap.evict_to_free_tokens_hook(original, h.alloc, None, 16) == "upstream"  # no tree cache
    assert cap.evict_to_free_tokens_hook(original, h.alloc, h.cache, 16, "future") == "upstream"
    assert cap.evict_to_free_tokens_hook(original, h.alloc, h.cache, 16, future=1) == "upstream"
    other = Harness(interleaved=False)
    assert cap.evict_to_free_tokens_hook(original, h.alloc, other.cache, 16) == "upstream"  # not its allocator
    assert calls == [
        (h.alloc, (None, 16), {}),
        (h.alloc, (h.cache, 16, "future"), {}),
        (h.alloc, (h.cache, 16), {"future": 1}),
        (h.alloc, (other.cache, 16), {}),
    ]
    assert h.evicted_tokens == 0


def busy(rng, short, leaves=30):
    """Random one- and two-page chains, some extending earlier ones; lanes in ``short`` drained."""
    h = Harness(n=4, ps=4, pages_per_rank=16)
    placed = []
    for _ in range(leaves):
        if placed and rng.random() < 0.3:
            keys, base = rng.choice(placed)
            got, _ = h.chain(base, 1, prefix=keys)
            keys = got
        else:
            base = rng.randrange(h.n)
            keys, _ = h.chain(base, rng.randint(1, 2))
        if keys is None:
            break
        placed.append((keys, base))
    for lane in short:
        h.hold(lane, h.alloc.class_free_page_counts()[lane])
    return h


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


def protocol(h, log):
    """Record the write-back steps upstream's ``_evict_components`` takes per victim, with their
    ``write_back`` argument and result, on this cache (instance attributes over the real methods)."""
    for name in ("_execute_and_commit_kv_backup", "writing_check", "_demote", "_drop_subtree_no_host"):
        real = getattr(h.cache, name)

        def step(*args, _real=real, _name=name, **kwargs):
            result = _real(*args, **kwargs)
            log.append((_name, kwargs.get("write_back"), result))
            return result

        setattr(h.cache, name, step)


def hold_every_host_page(h):
    """Host memory pressure: every host page held outside the tree (nothing on host to evict)."""
    slots = h.cc.mem_pool_host.anchor_entry.host_pool._slots
    for lane, pages in enumerate(slots.class_free_page_counts()):
        for _ in range(pages):
            assert slots.alloc_cyclic(start_class=lane, need_size=h.ps) is not None
    assert slots.class_free_page_counts() == [0] * h.n


@pytest.mark.parametrize("ps", [4, 1])
@pytest.mark.parametrize("host_full", [False, True])
def test_write_back_victims_take_upstreams_deferred_demote_steps(host_full, ps, caplog):
    """One victim, on write-back: the planned eviction takes the steps upstream's own eviction takes for
    one victim, with the same arguments and results (backup with write_back=True, a blocking
    writing_check, then demote; under host pressure the backup writes nothing and the subtree is
    dropped, with upstream's warning), and reports the tokens to upstream's eviction metrics."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    steps = []
    for through_hook in (False, True):
        h = lane0_newest("write_back", ps=ps)
        if host_full:
            hold_every_host_page(h)
        log = []
        protocol(h, log)
        with caplog.at_level("WARNING"), caplog.at_level("WARNING", logger=logger.name):
            if through_hook:
                h.alloc.evict_to_free_tokens(h.cache, 4 * ps)
            else:
                h.cache.evict(EvictParams(num_tokens=ps))  # upstream: its LRU leaf (lane 1)
        steps.append(log)
        assert h.evicted_tokens == ps and (h.alloc.available_size() >= 4 * ps) == through_hook
    assert steps[0] == steps[1]
    if host_full:
        victim = [("_execute_and_commit_kv_backup", True, 0), ("_drop_subtree_no_host", None, True)]
    else:
        victim = [("_execute_and_commit_kv_backup", True, ps), ("writing_check", True, None), ("_demote", None, None)]
    assert steps[1] == victim + [("writing_check", True, None)]
    dropped = [r.getMessage() for r in caplog.records if "dropped without backup" in r.getMessage()]
    assert len(dropped) == (2 if host_full else 0)
    if host_full:
        (mine,) = [m for m in dropped if m.endswith("(owner-lane eviction)")]
        assert re.fullmatch(
            r"write_back: KV subtree dropped without backup due to host memory pressure, root node \d+ "
            r"\(owner-lane eviction\)",
            mine,
        )
