"""A load-back the patch cannot or may not serve is a clean cache miss, with one warning saying why.

cp-hicache-owner-lanes on upstream's real HiRadixCache, PageInterleavePoolAllocator, HiCacheController and
host pool (CPU; only the copy engine is a stand-in). Invariant: an uncoverable deficit, an eviction or
allocation short of the plan, upstream's threshold and quota gates, a hybrid controller or an exception
inside the load leave no page, lock, host protection or queued load behind; each refusal logs one warning
(counted once), a normal load-back logs nothing, a slow plan one warning. Cost: under a second.
"""

from __future__ import annotations

import logging
import re

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of
from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc
from tests.patches.cp_hicache_owner_lanes.hiradix.lane_scenarios import (
    assert_reloaded,
    deficit_tree,
    evicted_suffix,
    evicted_target,
    free_counts,
    load,
)

pytestmark = pytest.mark.usefixtures("overlay")  # the overlay applied once per module (conftest.py)


def test_impossible_deficit_refused_cleanly(caplog):
    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    leaves = deficit_tree(cache, short_lane=3)
    for x in leaves[3]:
        cache.inc_lock_ref(x)
    node = cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(target))).best_match_node

    def snapshot():
        return (
            free_counts(cache),
            cache.evictable_size_,
            cache.protected_size_,
            cache.cache_controller.mem_pool_host.available_size(),
            len(cache.evictable_leaves),
        )

    before = snapshot()
    with caplog.at_level(logging.WARNING, logger="sglang_overlay.patches.cp_hicache_owner_lanes"):
        indices, last = cache.init_load_back(hc.InitLoadBackParams(best_match_node=node, host_hit_length=len(target)))
    assert len(indices) == 0 and last is cache.root_node  # a cache miss
    assert snapshot() == before  # nothing evicted, no page or lock leaked
    assert node.host_ref_counter == 0 and node.evicted and node.backuped
    assert cache.root_node.lock_ref == 1
    assert not cache.cache_controller.load_queue
    warnings = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(warnings) == 1
    msg = warnings[0].getMessage()
    assert re.fullmatch(
        rf"owner-lane load-back: refused for node {node.id}, deficit remains after planning: "
        r"need=\[1,1,1,1\] free=\[[0-9,]+\] deficit=\[0,0,0,1\] uncovered=\[0,0,0,1\] "
        r"\(\d+ leaves scanned\); nothing evicted",
        msg,
    ), msg
    c = counters_of(cache)
    assert c.refused == 1 and c.warnings == {"deficit_remains": 1} and c.leaves_evicted == 0
    for x in leaves[3]:
        cache.dec_lock_ref(x)
    cache.token_to_kv_pool_allocator.debug_check_classes()


def test_no_logging_on_a_normal_load_back(caplog, monkeypatch):
    # the slow-plan warning is wall time, which a loaded CI host can cross: out of scope here
    monkeypatch.setenv("SGLANG_OVERLAY_OWNER_LANE_SLOW_PLAN_MS", "60000")
    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    deficit_tree(cache, short_lane=0)
    with caplog.at_level(logging.DEBUG, logger="sglang_overlay"):
        load(cache, target)
    assert [r for r in caplog.records if r.name.startswith("sglang_overlay")] == []


def test_an_eviction_that_frees_less_than_planned_refuses_with_one_warning(caplog, monkeypatch):
    """The bug path (upstream changed what an eviction frees): the plan covered the deficit, the eviction
    freed nothing; the load is refused (a cache miss), with one warning naming each lane, counted once."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix import load_back as lb

    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    deficit_tree(cache, short_lane=0)
    monkeypatch.setattr(lb, "evict_planned", lambda cache, leaves: None)  # an eviction that frees nothing
    with caplog.at_level(logging.WARNING, logger="sglang_overlay.patches.cp_hicache_owner_lanes"):
        indices, last = load(cache, target)
    assert len(indices) == 0 and last is cache.root_node
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("sglang_overlay")]
    assert len(messages) == 1, messages
    assert messages[0].startswith("owner-lane load-back: eviction for node ")
    assert " freed less than planned: " in messages[0]
    assert re.search(
        r"planned=\[1,0,0,0\] freed=\[0,0,0,0\] need=\[1,1,1,1\] free=\[0,2,2,2\] deficit=\[1,0,0,0\]$", messages[0]
    ), messages[0]
    c = counters_of(cache)
    assert c.warnings == {"evicted_less_than_planned": 1} and c.pages_evicted_per_lane == [0, 0, 0, 0]
    assert c.leaves_evicted == 1  # the planned leaf, counted as the plan's


def test_an_allocation_that_fails_after_the_planned_eviction_refuses_with_one_warning(caplog, monkeypatch):
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix import load_back as lb

    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    deficit_tree(cache, short_lane=0)
    monkeypatch.setattr(lb, "alloc_owner_classed", lambda allocator, metas, last_loc: None)
    with caplog.at_level(logging.WARNING, logger="sglang_overlay.patches.cp_hicache_owner_lanes"):
        indices, last = load(cache, target)
    assert len(indices) == 0 and last is cache.root_node
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("sglang_overlay")]
    assert len(messages) == 1, messages
    assert re.fullmatch(
        r"owner-lane load-back: refused for node \d+, classes still short after the planned "
        r"eviction: need=\[1,1,1,1\] free=\[1,2,2,2\] deficit=\[1,0,0,0\]",
        messages[0],
    ), messages[0]
    assert counters_of(cache).warnings == {"evicted_less_than_planned": 1}


@pytest.mark.parametrize(
    "threshold, quota, loads",
    [(24, 36, True), (25, None, False), (0, 35, False)],
    ids=["at-both-bounds", "below-threshold", "over-quota"],
)
def test_the_threshold_and_quota_gates_are_upstreams_and_release_the_resident_prefix(threshold, quota, loads):
    """HiRadixCache.load_back's own gates, kept by the hook: at least ``load_back_threshold`` tokens, and
    at most ``mem_quota`` plus the lock delta of the resident prefix (locking its 12 tokens: -12, so a
    quota of 36 admits the 24 tokens and 35 does not); a refusal unlocks the prefix."""
    cache = hc.build_cpu_hicache(4, 4, 8)
    _, prefix, suffix = evicted_suffix(cache, 3, 6)
    cache.load_back_threshold = threshold
    indices = cache.load_back(suffix, quota)
    assert (indices is not None) is loads
    if loads:
        assert len(indices) == len(suffix.key) == 24
    else:
        assert suffix.evicted and suffix.host_ref_counter == 0
        assert prefix.lock_ref == 0 and cache.root_node.lock_ref == 1


def test_a_cache_with_extra_host_pools_is_refused_loudly_and_its_locks_released():
    """A hybrid controller (extra host pools: Mamba/SWA state) is outside what owner-classed load-back
    moves: the load raises, naming what to change, and leaves no lock or host protection behind."""
    cache = hc.build_cpu_hicache(4, 4, 8)
    _, prefix, suffix = evicted_suffix(cache, 3, 6)
    cache._get_extra_pools = lambda: [object()]
    with pytest.raises(RuntimeError) as raised:
        cache.load_back(suffix, None)
    assert str(raised.value) == (
        "cp-hicache-owner-lanes: owner-classed load-back supports the KV pool only; this cache has extra host "
        "pools (hybrid controller). Disable the patch (SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes) or the "
        "page-interleaved allocator."
    )
    assert prefix.lock_ref == 0 and suffix.host_ref_counter == 0 and suffix.evicted


class SteppingClock:
    """``time`` for load_back.py: ``perf_counter()`` advances 4 ms per call, so a plan takes exactly 4 ms."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 0.004
        return self.now


def test_slow_plan_warning_threshold(caplog, monkeypatch):
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix import load_back as lb

    monkeypatch.setenv("SGLANG_OVERLAY_OWNER_LANE_SLOW_PLAN_MS", "0")
    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    deficit_tree(cache, short_lane=0)
    monkeypatch.setattr(lb, "time", SteppingClock())
    with caplog.at_level(logging.WARNING, logger="sglang_overlay.patches.cp_hicache_owner_lanes"):
        load(cache, target)
    slow = [r.getMessage() for r in caplog.records if "planning for node" in r.getMessage()]
    assert len(slow) == 1, slow
    assert slow[0].startswith("owner-lane load-back: planning for node ")
    assert " took 4.00 ms (threshold 0.00 ms, " in slow[0]
    assert re.search(r"leaves scanned\); need=\[1,1,1,1\] free=\[[0-9,]+\] deficit=\[[0-9,]+\]$", slow[0]), slow[0]
    assert counters_of(cache).warnings == {"slow_plan": 1}
    assert counters_of(cache).last_plan_ms == pytest.approx(4.0)


def test_failure_inside_load_back_releases_everything(monkeypatch):
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix import load_back as lb

    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    deficit_tree(cache, short_lane=2)
    node = cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(target))).best_match_node
    index_size = len(state_of(cache).index)

    def broken(*args, **kwargs):
        raise RuntimeError("allocator exploded")

    monkeypatch.setattr(lb, "alloc_owner_classed", broken)
    with pytest.raises(RuntimeError, match="allocator exploded"):
        cache.load_back(node)
    assert node.host_ref_counter == 0 and node.evicted
    assert cache.root_node.lock_ref == 1
    assert all(x.lock_ref >= 0 for x in hc.all_nodes(cache))
    assert len(state_of(cache).index) <= index_size
    monkeypatch.undo()
    indices, _ = load(cache, target)  # and the cache still works
    assert len(indices) == len(target)
    assert_reloaded(cache, target)
