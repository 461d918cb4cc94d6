"""cp-hicache-owner-lanes on upstream's real HiRadixCache, PageInterleavePoolAllocator,
HiCacheController and host pool (CPU; only the copy engine is a stand-in)."""

from __future__ import annotations

import itertools
import logging
import re

import pytest

import sglang_overlay
from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.allocation import alloc_owner_classed
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of
from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc

_TOKENS = itertools.count(10_000, 7)


@pytest.fixture(scope="module", autouse=True)
def overlay():
    sglang_overlay.apply()
    from sglang.srt.mem_cache.hiradix_cache import HiRadixCache

    assert hasattr(HiRadixCache.load_back, "__wrapped__"), "patch not applied"


def fresh(n_tokens):
    start = next(_TOKENS) * 1000
    return list(range(start, start + n_tokens))


def free_counts(cache):
    return cache.token_to_kv_pool_allocator.class_free_page_counts()


def leaf_chain(cache, base, pages=1):
    """Insert a `pages`-page chain whose first page is in class `base`; returns its node."""
    ps = cache.page_size
    toks = fresh(pages * ps)
    new, b = hc.alloc_chain(cache, 0, len(toks), base)
    assert new is not None
    hc.write_rows(cache, new, toks)
    cache.insert(hc.InsertParams(key=hc.key_of(toks), value=new.clone(), rotation_base=b))
    hc.settle(cache)
    return hc.path_nodes(cache, toks)[-1][0]


def evicted_target(cache, pages):
    """A chain of `pages` pages (base 0) that is evicted to host; returns its tokens."""
    toks = fresh(pages * cache.page_size)
    hc.prefill(cache, toks)
    node = hc.path_nodes(cache, toks)[-1][0]
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    evict_planned(cache, [node])
    hc.settle(cache)
    assert node.evicted and node.backuped
    return toks


def evicted_suffix(cache, prefix_pages, suffix_pages):
    """A chain of a resident ``prefix_pages``-page node and a ``suffix_pages``-page child evicted to host;
    returns (tokens, prefix node, suffix node)."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    ps = cache.page_size
    toks = fresh(prefix_pages * ps) + fresh(suffix_pages * ps)
    hc.prefill(cache, toks[: prefix_pages * ps])
    hc.prefill(cache, toks)
    prefix, suffix = [x for x, _ in hc.path_nodes(cache, toks)]
    evict_planned(cache, [suffix])
    hc.settle(cache)
    return toks, prefix, suffix


def deficit_tree(cache, short_lane, spare=2, short_last=False):
    """Fill the pool with one-page leaves until `short_lane` has no free page and
    every other lane keeps `spare` free pages. Lanes interleave in LRU order, or
    (``short_last``) the short lane's leaves are the most recently used."""
    n = cache.token_to_kv_pool_allocator.shard_size
    leaves = {c: [] for c in range(n)}
    rounds = [[c for c in range(n) if c != short_lane], [short_lane]] if short_last else [range(n)]
    for lanes in rounds:
        progress = True
        while progress:
            progress = False
            for c in lanes:
                target = 0 if c == short_lane else spare
                if free_counts(cache)[c] > target:
                    leaves[c].append(leaf_chain(cache, c))
                    progress = True
    return leaves


def load(cache, toks):
    match = cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(toks)))
    indices, last = cache.init_load_back(
        hc.InitLoadBackParams(best_match_node=match.best_match_node, host_hit_length=match.host_hit_length)
    )
    hc.settle(cache)
    return indices, last


def assert_reloaded(cache, toks):
    n = cache.token_to_kv_pool_allocator.shard_size
    ps = cache.page_size
    nodes = hc.path_nodes(cache, toks)
    assert sum(len(x.key) for x, _ in nodes) == len(toks)
    for node, off in nodes:
        assert not node.evicted
        meta = md.get(node)
        assert meta.owner_counts() == hc.oracle_owner_counts(node, n, ps)
        assert meta.first_owner == hc.oracle_first_owner(node, n, ps)
        assert meta.start_page == off // ps and meta.num_pages == len(node.key) // ps
        assert hc.rows_match(cache, node.value, toks[off : off + len(node.key)])


# --------------------------------------------------------------------------- lane deficit


@pytest.mark.parametrize("need_sort", [False, True])
@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_lane_deficit_patch_evicts_only_short_lane(policy, need_sort):
    cache = hc.build_cpu_hicache(4, 4, 6, write_policy=policy, need_sort=need_sort)
    cache.token_to_kv_pool_allocator.debug_mode = True  # upstream's own congruence/uniqueness checks
    target = evicted_target(cache, 4)  # one page in every lane
    short = 2
    leaves = deficit_tree(cache, short, short_last=True)
    free = free_counts(cache)
    assert free[short] == 0 and sum(free) >= 4  # aggregate is enough, one class empty
    resident_before = {c: [x for x in ls if not x.evicted] for c, ls in leaves.items()}

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert_reloaded(cache, target)
    evicted = [x for ls in leaves.values() for x in ls if x.evicted or x.parent is None]
    assert evicted == [resident_before[short][0]]  # the oldest leaf of the short lane, only
    c = counters_of(cache)
    assert c.load_backs == 1 and c.leaves_evicted == 1
    assert c.pages_evicted_per_lane == [0, 0, 1, 0]
    cache.token_to_kv_pool_allocator.debug_check_classes()


def test_lane_deficit_upstream_fails_or_over_evicts():
    """Upstream's load_back cannot allocate on this allocator at all; its fallback
    (evict(num_tokens) by LRU) frees the wrong lanes."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams
    from sglang.srt.mem_cache.hiradix_cache import HiRadixCache

    upstream_load_back = HiRadixCache.load_back.__wrapped__
    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    deficit_tree(cache, short_lane=2, short_last=True)
    node = cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(target))).best_match_node
    with pytest.raises(NotImplementedError):
        upstream_load_back(cache, node)
    # Upstream's own cleanup never ran: the raise left the host protection and
    # the ancestor lock behind (shown, then undone for the rest of the check).
    assert node.host_ref_counter == 1
    node.release_host()
    cache.dec_lock_ref(cache.root_node)

    # The fallback upstream would take: evict(len(host_indices)) by LRU.
    before = free_counts(cache)
    cache.evict(EvictParams(num_tokens=len(target)))
    hc.settle(cache)
    after = free_counts(cache)
    assert after[2] == before[2] == 0  # the short lane is still empty
    assert sum(after) - sum(before) >= 4  # while other lanes were freed
    assert alloc_owner_classed(cache.token_to_kv_pool_allocator, [md.get(node)]) is None


def test_locked_and_non_deficit_leaves_skipped():
    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    leaves = deficit_tree(cache, short_lane=1)
    oldest, second = leaves[1][0], leaves[1][1]
    cache.inc_lock_ref(oldest)
    others = [x for c, ls in leaves.items() if c != 1 for x in ls]

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert not oldest.evicted and oldest.parent is not None  # locked: kept
    assert second.evicted or second.parent is None  # next in LRU order of the short lane
    assert all(not x.evicted and x.parent is not None for x in others)  # non-deficit lanes kept
    assert counters_of(cache).leaves_scanned >= 2
    cache.dec_lock_ref(oldest)
    assert_reloaded(cache, target)


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


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_evict_planned_passes_over_what_is_not_evictable_and_reports_the_tokens_it_freed(policy):
    """A locked leaf first in the list is passed over, not the end of the list; the tokens evicted are
    returned and handed to upstream's eviction metrics, once per call."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    cache = hc.build_cpu_hicache(4, 4, 8, write_policy=policy)
    locked, one, two = leaf_chain(cache, 0), leaf_chain(cache, 1), leaf_chain(cache, 2, pages=2)
    cache.inc_lock_ref(locked)
    reported = []
    cache.update_eviction_metrics = lambda num_evicted, start: reported.append(num_evicted)
    evicted = evict_planned(cache, [locked, one, two])
    hc.settle(cache)
    assert evicted == len(one.key) + len(two.key) == 3 * cache.page_size
    assert reported == [evicted]
    assert not locked.evicted and locked.parent is not None
    cache.dec_lock_ref(locked)


def test_write_back_eviction_counts_backed_up_and_newly_backed_up_leaves_alike():
    """Under write-back a leaf loaded back from host is still backed up (evicted at once), a fresh one is
    backed up first then detached: the tokens evicted are their sum, whatever the order."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    cache = hc.build_cpu_hicache(4, 4, 8, write_policy="write_back")
    cache.load_back_threshold = 0
    backed = leaf_chain(cache, 0)
    assert evict_planned(cache, [backed]) == 4
    hc.settle(cache)
    assert cache.load_back(backed) is not None
    hc.settle(cache)
    fresh_leaf = leaf_chain(cache, 1, pages=2)
    assert backed.backuped and not backed.evicted and not fresh_leaf.backuped
    assert evict_planned(cache, [fresh_leaf, backed]) == 8 + 4
    hc.settle(cache)
    assert backed.evicted and fresh_leaf.evicted and fresh_leaf.backuped


def test_write_back_under_host_pressure_drops_the_leaf_and_counts_it_as_upstream_does():
    """Every host slot held elsewhere: the backup writes nothing, so the planned leaf's subtree is dropped
    (upstream's ``_drop_subtree_no_host``) and its tokens count as evicted, as upstream's own eviction does."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    evicted = []
    for planned in (False, True):
        cache = hc.build_cpu_hicache(4, 4, 8, write_policy="write_back")
        host = cache.cache_controller.mem_pool_host
        assert host.alloc(host.available_size()) is not None and host.available_size() == 0
        leaf = leaf_chain(cache, 1, pages=2)
        before = cache.evictable_size()
        if planned:
            evicted.append(evict_planned(cache, [leaf]))
        else:
            cache.evict(hc.EvictParams(num_tokens=8))  # upstream: its one leaf
            evicted.append(before - cache.evictable_size())
        hc.settle(cache)
        assert leaf.evicted and not leaf.backuped and leaf.host_value is None
    assert evicted == [8, 8]


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


def test_rotation_base_of_answers_from_metadata_only_for_a_stamped_node_of_a_page_interleaved_cache():
    """Every other call is upstream's, with its own arguments: the root, an object that is no tree node,
    and any node of a cache that is not page-interleaved."""
    from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache

    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix import load_back as lb
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix import stamping as hooks

    upstream = BasePrefixCache.rotation_base_of.__wrapped__
    cache = hc.build_cpu_hicache(4, 4, 8)
    node = leaf_chain(cache, 2)
    # a chain from the root whose first page is in lane 2
    assert cache.rotation_base_of(node) == md.get(node).rotation_base == 2
    assert cache.rotation_base_of(cache.root_node) == upstream(cache, cache.root_node)
    seen = []

    def original(self, n):
        seen.append((self, n))
        return "upstream's answer"

    other = object()
    assert hooks.rotation_base_of_hook(original, cache, other) == "upstream's answer"
    assert hooks.rotation_base_of_hook(original, cache, cache.root_node) == "upstream's answer"
    assert seen == [(cache, other), (cache, cache.root_node)]
    plain = hc.build_cpu_hicache(1, 4, 8)  # one lane: not page-interleaved, the patch stays out
    assert state_of(plain) is None
    seen.clear()
    assert hooks.rotation_base_of_hook(original, plain, node) == "upstream's answer" and seen == [(plain, node)]
    # the load-back hook on a cache the patch stays out of: upstream's call, quota included
    calls = []
    assert lb.load_back_hook(lambda self, n, q: calls.append((self, n, q)) or "loaded", plain, node, 7) == "loaded"
    assert calls == [(plain, node, 7)]


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


def test_an_unstamped_evicted_node_continues_its_parents_chain_when_loaded_back():
    """A node the patch never stamped (created before it took, or by a path without a rotation base):
    its metadata is derived by continuing the resident parent's chain, and the load-back lands congruent."""
    cache = hc.build_cpu_hicache(4, 4, 8)
    toks, prefix, suffix = evicted_suffix(cache, 2, 3)
    stamped = md.get(suffix)
    md.put(suffix, None)
    indices, _ = load(cache, toks)
    assert len(indices) == 3 * 4
    derived = md.get(suffix)
    assert derived.start_page == 2 and derived.num_pages == 3 and derived.first_owner == md.get(prefix).next_owner
    assert derived.rotation_base == stamped.rotation_base == md.get(prefix).rotation_base
    assert_chain_congruent(cache, toks)


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


# --------------------------------------------------------------------------- metadata vs oracle


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("shard_size", [2, 4, 8])
def test_split_backed_and_reloaded_metadata(shard_size, page_size, policy):
    n, ps = shard_size, page_size
    cache = hc.build_cpu_hicache(n, ps, 12, write_policy=policy, layers=1, heads=1, head_dim=2)
    pages = n + 3 + (8 if ps == 1 else 0)  # not a multiple of N; >= load_back_threshold tokens
    target = evicted_target(cache, pages)
    node = hc.path_nodes(cache, target)[0][0]
    meta = md.get(node)
    # backed-only: metadata kept though the device indices are gone
    assert node.value is None and meta.num_pages == pages and meta.start_page == 0
    # split the host-only node by matching a shorter prefix
    cut = 3 * ps
    cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(target[:cut])))
    halves = hc.path_nodes(cache, target)
    assert [len(x.key) for x, _ in halves] == [cut, len(target) - cut]
    left, right = md.get(halves[0][0]), md.get(halves[1][0])
    assert (left.first_owner, left.num_pages) == (meta.first_owner, 3)
    assert (right.first_owner, right.start_page) == ((meta.first_owner + 3) % n, 3)
    assert tuple(a + b for a, b in zip(left.owner_counts(), right.owner_counts())) == meta.owner_counts()
    # reload both halves into a pool whose lanes are full: planning must make room
    deficit_tree(cache, short_lane=n - 1, spare=1)
    indices, _ = load(cache, target)
    assert len(indices) == len(target)
    assert_reloaded(cache, target)
    # split a resident node: both halves still equal the oracle
    cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(target[: cut + ps])))
    assert_reloaded(cache, target)
    cache.token_to_kv_pool_allocator.debug_check_classes()


def test_extension_of_a_chain_continues_its_rotation():
    """rotation_base_of answers from metadata, so an extension lands on the right owners."""
    cache = hc.build_cpu_hicache(4, 16, 8)
    toks = fresh(3 * 16)
    hc.prefill(cache, toks)
    longer = toks + fresh(5 * 16)
    hc.prefill(cache, longer)
    nodes = hc.path_nodes(cache, longer)
    assert len(nodes) == 2
    for node, off in nodes:
        assert md.get(node).first_owner == hc.oracle_first_owner(node, 4, 16)
        assert md.get(node).owner_counts() == hc.oracle_owner_counts(node, 4, 16)
        assert md.get(node).rotation_base == md.get(nodes[0][0]).rotation_base


def test_insert_without_rotation_base_uses_request_base_or_continuation():
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams

    cache = hc.build_cpu_hicache(4, 4, 8)
    toks = fresh(4 * 4)
    new, base = hc.alloc_chain(cache, 0, len(toks), 3)
    cache.insert(InsertParams(key=hc.key_of(toks), value=new.clone(), rotation_base=base))
    # extension inserted with no base: continues the parent's phase
    ext = toks + fresh(2 * 4)
    more, _ = hc.alloc_chain(cache, len(toks), len(ext), base)
    cache.insert(InsertParams(key=hc.key_of(ext), value=hc.torch.cat([new, more]).clone()))
    child = hc.path_nodes(cache, ext)[-1][0]
    assert md.get(child).first_owner == hc.oracle_first_owner(child, 4, 4)
    assert md.get(child).start_page == 4


def test_insert_with_no_base_anywhere_takes_the_least_full_lane():
    """A new chain at the root inserted with no rotation base (no request base either): the stamp is
    the allocator's least-full class at insert time, from position-page 0 (the documented fallback)."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams

    cache = hc.build_cpu_hicache(4, 4, 8)
    toks = fresh(2 * 4)
    new, _ = hc.alloc_chain(cache, 0, len(toks), 1)
    guess = state_of(cache).allocator.least_full_class()
    cache.insert(InsertParams(key=hc.key_of(toks), value=new.clone()))
    meta = md.get(hc.path_nodes(cache, toks)[-1][0])
    assert (meta.first_owner, meta.start_page, meta.num_pages) == (guess, 0, 2)


def test_unstamped_links_are_derived_top_down_by_continuation():
    """Nodes never stamped (created before the patch took): ensure_meta gives the chain's first node
    the least-full class at position-page 0 and each node below it its parent's continuation; an
    insert below an unstamped node derives the parent first and continues it."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams

    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import ensure_meta

    cache = hc.build_cpu_hicache(4, 4, 8)
    state = state_of(cache)
    toks = fresh(2 * 4)
    ext = toks + fresh(3 * 4)
    hc.prefill(cache, toks)
    hc.prefill(cache, ext)
    (top, _), (below, _) = hc.path_nodes(cache, ext)
    md.put(top, None)
    md.put(below, None)
    guess = state.allocator.least_full_class()
    assert cache.rotation_base_of(below) == guess  # upstream's seam asks: derived, and stamped on the way
    derived = ensure_meta(cache, state, below)
    assert (md.get(top).first_owner, md.get(top).start_page, md.get(top).num_pages) == (guess, 0, 2)
    assert derived is md.get(below) and derived == md.get(top).continuation(3)

    md.put(top, None)  # an insert of a base-less extension under an unstamped chain
    md.put(below, None)
    more = ext + fresh(4)
    tail, _ = hc.alloc_chain(cache, len(ext), len(more), None, int(below.value[-1]))
    cache.insert(InsertParams(key=hc.key_of(more), value=hc.torch.cat([top.value, below.value, tail]).clone()))
    last = hc.path_nodes(cache, more)[-1][0]
    assert md.get(top).start_page == 0 and md.get(below) == md.get(top).continuation(3)
    assert md.get(last) == md.get(below).continuation(1)


def test_stamping_walks_the_path_of_the_keys_own_namespace():
    """The same tokens under different extra keys (two LoRA adapters, say) or cache salts are different
    paths: each chain is stamped from its own base, not from the chain of another namespace."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    cache = hc.build_cpu_hicache(4, 4, 8)
    toks = fresh(2 * 4)
    spaces = ((None, None, 0), ("adapter-a", None, 1), (None, "salt", 2), ("adapter-a", "salt", 3))
    for extra, salt, base in spaces:
        new, _ = hc.alloc_chain(cache, 0, len(toks), base)
        cache.insert(InsertParams(key=RadixKey(toks, extra, cache_salt=salt), value=new.clone(), rotation_base=base))
    owners = sorted(md.get(child).first_owner for child in cache.root_node.children.values())
    assert owners == [0, 1, 2, 3]


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_not_page_interleaved_keeps_upstream(page_size, policy):
    """N = 1 (upstream's paged allocator): no state, no metadata, upstream load_back runs."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    cache = hc.build_cpu_hicache(1, page_size, 32, write_policy=policy, layers=1, heads=1, head_dim=2)
    toks = fresh(16 * page_size)
    hc.prefill(cache, toks)
    node = hc.path_nodes(cache, toks)[-1][0]
    cache.evict(EvictParams(num_tokens=len(toks)))
    hc.settle(cache)
    assert node.evicted and node.backuped
    indices, _ = load(cache, toks)
    assert len(indices) == len(toks) and hc.rows_match(cache, node.value, toks)
    assert state_of(cache) is None and counters_of(cache) is None
    assert all(md.get(x) is None for x in hc.all_nodes(cache))


def test_plain_radix_cache_untouched():
    """The RadixCache-level hooks (leaf status, cache_*_req) leave other caches alone."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixCache

    cache = RadixCache.create_simulated(page_size=1)
    cache.insert(InsertParams(key=hc.key_of([1, 2, 3])))
    cache.insert(InsertParams(key=hc.key_of([1, 2, 4, 5])))
    assert len(cache.evictable_leaves) == 2  # leaf status still upstream's
    leaf = next(iter(cache.evictable_leaves))
    cache.inc_lock_ref(leaf)
    assert leaf not in cache.evictable_leaves
    cache.dec_lock_ref(leaf)
    assert leaf in cache.evictable_leaves
    assert not cache.__dict__.get("_cp_owner_lanes")
    assert cache.rotation_base_of(cache.root_node) is None


def test_counters_reach_prometheus_with_metrics_enabled():
    from prometheus_client import REGISTRY

    cache = hc.build_cpu_hicache(4, 4, 6, enable_metrics=True)
    assert cache.metrics_collector is not None
    target = evicted_target(cache, 4)
    deficit_tree(cache, short_lane=1, short_last=True)
    labels = dict(cache.metrics_collector.labels)

    def sample(name, **extra):
        return REGISTRY.get_sample_value(name, {**labels, **extra}) or 0.0

    before = sample("sglang:cp_owner_lane_evicted_pages_total", lane="1")
    before0 = sample("sglang:cp_owner_lane_evicted_pages_total", lane="0")
    loads = sample("sglang:cp_owner_lane_load_backs_total", outcome="loaded")
    load(cache, target)
    assert sample("sglang:cp_owner_lane_evicted_pages_total", lane="1") == before + 1
    assert sample("sglang:cp_owner_lane_evicted_pages_total", lane="0") == before0
    assert sample("sglang:cp_owner_lane_load_backs_total", outcome="loaded") == loads + 1


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_parent_that_becomes_a_leaf_joins_the_walk(policy):
    """Lane 0 can only be covered by evicting a leaf and then its parent."""
    cache = hc.build_cpu_hicache(4, 4, 4, write_policy=policy)
    target = evicted_target(cache, 8)  # two pages in every lane
    prompt = fresh(4 * 4)  # lanes 0,1,2,3
    hc.prefill(cache, prompt)
    leaf_toks = prompt + fresh(4)  # position-page 4: lane 0
    hc.prefill(cache, leaf_toks)
    parent, leaf = [x for x, _ in hc.path_nodes(cache, leaf_toks)]
    locked = [leaf_chain(cache, 0), leaf_chain(cache, 0)]
    for x in locked:
        cache.inc_lock_ref(x)
    fillers = deficit_tree(cache, short_lane=0, spare=0)
    assert free_counts(cache) == [0, 0, 0, 0]

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert leaf.evicted or leaf.parent is None
    assert parent.evicted
    assert all(not x.evicted for x in locked)
    assert sum(x.evicted or x.parent is None for ls in fillers.values() for x in ls) == 3
    assert counters_of(cache).pages_evicted_per_lane == [2, 2, 2, 2]
    for x in locked:
        cache.dec_lock_ref(x)
    assert_reloaded(cache, target)


def fill_lane_locked(cache, lane, spare_others=1):
    """Exhaust ``lane`` with locked one-page leaves, leave ``spare_others`` free pages in
    every other lane (unlocked fillers); returns (locked, fillers)."""
    n = cache.token_to_kv_pool_allocator.shard_size
    locked, fillers = [], []
    while free_counts(cache)[lane] > 0:
        locked.append(leaf_chain(cache, lane))
        cache.inc_lock_ref(locked[-1])
    for c in range(n):
        while c != lane and free_counts(cache)[c] > spare_others:
            fillers.append(leaf_chain(cache, c))
    return locked, fillers


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_chain_through_a_child_that_frees_only_another_lane(policy):
    """The only lane-0 page that can go sits in an interior node whose one child frees
    only lane 1: the load-back evicts the child, then the parent (it was refused before)."""
    cache = hc.build_cpu_hicache(4, 4, 6, write_policy=policy)
    cache.token_to_kv_pool_allocator.debug_mode = True
    target = evicted_target(cache, 4)  # one page in every lane
    parent = leaf_chain(cache, 0)  # lane 0
    parent_toks = list(parent.key.token_ids)
    child_toks = parent_toks + fresh(4)
    hc.prefill(cache, child_toks)  # position-page 1: lane 1
    child = hc.path_nodes(cache, child_toks)[-1][0]
    assert hc.path_nodes(cache, child_toks)[0][0] is parent and len(parent.children) == 1
    assert (md.get(parent).first_owner, md.get(child).first_owner) == (0, 1)
    locked, fillers = fill_lane_locked(cache, 0)
    assert free_counts(cache)[0] == 0

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert (child.evicted or child.parent is None) and parent.evicted
    assert all(not x.evicted and x.parent is not None for x in locked + fillers)
    c = counters_of(cache)
    assert c.load_backs == 1 and c.refused == 0 and c.leaves_evicted == 2
    assert c.pages_evicted_per_lane == [1, 1, 0, 0]
    for x in locked:
        cache.dec_lock_ref(x)
    assert_reloaded(cache, target)
    cache.token_to_kv_pool_allocator.debug_check_classes()


def page_owners_along(cache, toks):
    """Owner class of every position-page on ``toks``' path, read from the device indices
    alone (an oracle independent of the patch's metadata)."""
    n, ps = cache.token_to_kv_pool_allocator.shard_size, cache.page_size
    owners = []
    for node, _ in hc.path_nodes(cache, toks):
        owners += [int(x) // ps % n for x in node.value[::ps]]
    return owners


def assert_chain_congruent(cache, toks):
    """Position-page P of the chain sits in class (b + P) % N, b from its real first page."""
    n = cache.token_to_kv_pool_allocator.shard_size
    owners = page_owners_along(cache, toks)
    assert len(owners) * cache.page_size == len(toks)
    assert owners == [(owners[0] + p) % n for p in range(len(owners))], owners


def spy_alloc_extend(monkeypatch, alloc):
    """Record the last_loc every alloc_extend call hands upstream's congruence check."""
    seen = []
    real = alloc.alloc_extend

    def spy(*args, **kwargs):
        seen.append(args[4].clone())
        return real(*args, **kwargs)

    monkeypatch.setattr(alloc, "alloc_extend", spy)
    return seen


def test_suffix_load_back_under_resident_prefix_keeps_rotation(monkeypatch):
    """A host suffix below a resident prefix comes back on the prefix's real rotation, and
    upstream's debug congruence check in alloc_extend is fed the prefix's real last slot."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    cache = hc.build_cpu_hicache(4, 4, 8)
    alloc = cache.token_to_kv_pool_allocator
    alloc.debug_mode = True
    toks = fresh(3 * 4) + fresh(6 * 4)
    new, base = hc.alloc_chain(cache, 0, 12, 3)  # a base the least-full rule would not pick
    hc.write_rows(cache, new, toks[:12])
    cache.insert(hc.InsertParams(key=hc.key_of(toks[:12]), value=new.clone(), rotation_base=base))
    hc.prefill(cache, toks)
    prefix, suffix = [x for x, _ in hc.path_nodes(cache, toks)]
    evict_planned(cache, [suffix])
    hc.settle(cache)
    assert suffix.evicted and not prefix.evicted
    deficit_tree(cache, short_lane=2, spare=0)
    seen = spy_alloc_extend(monkeypatch, alloc)
    indices, _ = load(cache, toks)
    assert len(indices) == 6 * 4
    assert_chain_congruent(cache, toks)
    assert page_owners_along(cache, toks)[0] == 3
    assert [int(x) for x in seen[-1]] == [int(prefix.value[-1])]  # the real slot, not a derived one
    assert_reloaded(cache, toks)
    assert md.get(suffix).rotation_base == md.get(prefix).rotation_base == 3


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_suffix_with_a_stale_base_comes_back_on_the_recomputed_prefix(policy):
    """Prefix and suffix go to host; the prefix alone is recomputed on another rotation
    (an insert re-points it); the suffix must then load back on the prefix's new rotation,
    not on the base it was stored with."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    cache = hc.build_cpu_hicache(4, 4, 8, write_policy=policy)
    cache.token_to_kv_pool_allocator.debug_mode = True
    toks = fresh(3 * 4) + fresh(5 * 4)
    hc.prefill(cache, toks[:12])
    hc.prefill(cache, toks)
    prefix, suffix = [x for x, _ in hc.path_nodes(cache, toks)]
    old_base = md.get(prefix).rotation_base
    evict_planned(cache, [suffix, prefix])
    hc.settle(cache)
    assert prefix.evicted and suffix.evicted
    new_base = (old_base + 1) % 4
    new, _ = hc.alloc_chain(cache, 0, 12, new_base)  # the prefix recomputed (no load-back)
    hc.write_rows(cache, new, toks[:12])
    cache.insert(hc.InsertParams(key=hc.key_of(toks[:12]), value=new.clone(), rotation_base=new_base))
    hc.settle(cache)
    assert not prefix.evicted and suffix.evicted
    assert md.get(prefix).rotation_base == new_base == hc.oracle_first_owner(prefix, 4, 4)

    indices, _ = load(cache, toks)

    assert len(indices) == 5 * 4
    assert_chain_congruent(cache, toks)
    assert_reloaded(cache, toks)
    assert md.get(suffix).rotation_base == new_base
    assert cache.rotation_base_of(suffix) == new_base


@pytest.mark.parametrize("split", [False, True])
def test_insert_re_pointing_an_evicted_node_restamps_it(split):
    """An evicted node that an insert re-points at a request's fresh pages (KV recomputed
    after a missed load-back) is re-stamped from the request's base; with ``split`` the
    request covers only a prefix of the evicted node, which the insert splits off."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    cache = hc.build_cpu_hicache(4, 4, 8)
    toks = fresh(6 * 4)
    new, _ = hc.alloc_chain(cache, 0, len(toks), 0)
    hc.write_rows(cache, new, toks)
    cache.insert(hc.InsertParams(key=hc.key_of(toks), value=new.clone(), rotation_base=0))
    hc.settle(cache)
    node = hc.path_nodes(cache, toks)[-1][0]
    evict_planned(cache, [node])
    hc.settle(cache)
    assert node.evicted and md.get(node).rotation_base == 0
    again = toks[: 2 * 4] if split else toks
    fresh_pages, base = hc.alloc_chain(cache, 0, len(again), 2)
    hc.write_rows(cache, fresh_pages, again)
    cache.insert(hc.InsertParams(key=hc.key_of(again), value=fresh_pages.clone(), rotation_base=base))
    hc.settle(cache)
    repointed = hc.path_nodes(cache, again)[-1][0]
    assert not repointed.evicted and len(repointed.key) == len(again)
    assert (repointed is node) != split
    assert md.get(repointed).first_owner == hc.oracle_first_owner(repointed, 4, 4) == 2
    assert md.get(repointed).owner_counts() == hc.oracle_owner_counts(repointed, 4, 4)
    assert cache.rotation_base_of(repointed) == 2
    assert_chain_congruent(cache, again)


def test_a_base_less_insert_re_pointing_an_evicted_node_keeps_its_stamp():
    """Without a rotation base (none in the insert, none from a request) the insert cannot know the lanes
    of the fresh pages without reading them: the re-pointed node keeps the stamp it had, and the insert
    goes through."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    cache = hc.build_cpu_hicache(4, 4, 8)
    toks = fresh(3 * 4)
    new, _ = hc.alloc_chain(cache, 0, len(toks), 1)
    cache.insert(hc.InsertParams(key=hc.key_of(toks), value=new.clone(), rotation_base=1))
    hc.settle(cache)
    node = hc.path_nodes(cache, toks)[-1][0]
    evict_planned(cache, [node])
    hc.settle(cache)
    fresh_pages, _ = hc.alloc_chain(cache, 0, len(toks), 1)
    cache.insert(hc.InsertParams(key=hc.key_of(toks), value=fresh_pages.clone()))
    hc.settle(cache)
    assert not node.evicted and md.get(node).rotation_base == 1 and md.get(node).num_pages == 3


def test_an_insert_that_splits_a_node_stamps_the_new_leaf_at_once():
    """P+X cached, then P+Y: the insert splits P off X and adds Y. Both walked nodes are stamped at the
    insert (Y visible to the planner without a later derivation), on the chain's rotation."""
    cache = hc.build_cpu_hicache(4, 4, 8)
    p, x, y = fresh(2 * 4), fresh(1 * 4), fresh(3 * 4)
    hc.prefill(cache, p + x)
    hc.prefill(cache, p + y)
    (prefix, _), (leaf, _) = hc.path_nodes(cache, p + y)
    base = md.get(prefix).rotation_base
    assert md.get(prefix) == md.CpHiCacheNodeMetadata.for_chain(4, base, 0, 2)
    assert md.get(leaf) == md.CpHiCacheNodeMetadata.for_chain(4, base, 2, 3)
    assert md.get(leaf).owner_counts() == hc.oracle_owner_counts(leaf, 4, 4)


def test_load_back_under_an_unstamped_resident_prefix_derives_the_prefix_first():
    """The resident prefix lost its stamp (created before the patch took): the load-back derives it
    (continuation rule) and loads the suffix on that chain's rotation."""
    cache = hc.build_cpu_hicache(4, 4, 8)
    cache.load_back_threshold = 0
    toks, prefix, suffix = evicted_suffix(cache, 2, 3)
    md.put(prefix, None)
    guess = state_of(cache).allocator.least_full_class()
    assert cache.load_back(suffix) is not None
    hc.settle(cache)
    assert md.get(prefix) == md.CpHiCacheNodeMetadata.for_chain(4, guess, 0, 2)
    assert md.get(suffix).rotation_base == guess and not suffix.evicted


def test_prune_keeps_an_older_leaf_a_later_pick_made_redundant():
    """The walk takes the oldest lane-0 leaf, then a two-page leaf for lane 1 that also
    frees lane 0: the first pick is dropped again and survives the load-back."""
    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)  # one page in every lane
    single = leaf_chain(cache, 0)  # lane 0, oldest
    double = leaf_chain(cache, 0, pages=2)  # lanes 0 and 1
    locked = []
    for lane in (0, 1):
        more, _ = fill_lane_locked(cache, lane, spare_others=1)
        locked += more
    assert free_counts(cache)[:2] == [0, 0] and min(free_counts(cache)[2:]) >= 1

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert double.evicted or double.parent is None
    assert not single.evicted and single.parent is not None
    c = counters_of(cache)
    assert c.leaves_evicted == 1 and c.pages_evicted_per_lane == [1, 1, 0, 0]
    for x in locked:
        cache.dec_lock_ref(x)
    assert_reloaded(cache, target)


def test_cache_finished_req_carries_the_request_rotation_base():
    """Upstream's cache_finished_req builds InsertParams without rotation_base; the
    patch hands the request's kv_rotation_base to the insert."""
    from array import array
    from types import SimpleNamespace

    import torch
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    cache = hc.build_cpu_hicache(4, 4, 8)
    cache.req_to_token_pool = ReqToTokenPool(4, 256, "cpu", False)
    alloc = cache.token_to_kv_pool_allocator
    # make the least-full guess differ from the base the request really used
    leaf_chain(cache, 0)
    leaf_chain(cache, 0)
    toks = fresh(5 * 4)
    base = 2
    assert alloc.least_full_class() != base
    new, _ = hc.alloc_chain(cache, 0, len(toks), base)
    cache.req_to_token_pool.req_to_token[0, : len(toks)] = new.to(torch.int32)
    req = SimpleNamespace(
        origin_input_ids=array("q", toks),
        output_ids=array("q"),
        extra_key=None,
        cache_salt=None,
        priority=0,
        kv=SimpleNamespace(req_pool_idx=0, cache_protected_len=0),
        last_node=None,
        kv_rotation_base=base,
    )
    cache.cache_finished_req(req, kv_len_to_handle=len(toks))
    node = hc.path_nodes(cache, toks)[-1][0]
    assert md.get(node).first_owner == hc.oracle_first_owner(node, 4, 4) == base
    assert md.get(node).owner_counts() == hc.oracle_owner_counts(node, 4, 4)
    assert cache.rotation_base_of(node) == base


def real_req(cache, toks, base, pool_idx=0):
    """Upstream's own Req, its KV slots written in a real ReqToTokenPool as a prefill would."""
    from array import array

    import torch
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    req = Req(f"r{pool_idx}", "", array("q", toks), SamplingParams(max_new_tokens=4))
    req._refresh_fill_ids()
    req.set_extend_range(0, len(toks))
    req.kv.req_pool_idx = pool_idx
    req.last_node = cache.root_node
    req.prefix_indices = torch.empty(0, dtype=torch.int64)
    req.kv_rotation_base = base
    new, _ = hc.alloc_chain(cache, 0, len(toks), base)
    cache.req_to_token_pool.req_to_token[pool_idx, : len(toks)] = new.to(torch.int32)
    return req


def test_cache_unfinished_req_carries_the_request_rotation_base():
    """A chunked prefill caches its first chunk through cache_unfinished_req, whose
    InsertParams carry no rotation_base upstream: the patch hands it the request's."""
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    cache = hc.build_cpu_hicache(4, 4, 8)
    cache.req_to_token_pool = ReqToTokenPool(4, 256, "cpu", False)
    alloc = cache.token_to_kv_pool_allocator
    leaf_chain(cache, 0)
    leaf_chain(cache, 0)
    base = 2
    assert alloc.least_full_class() != base  # the fallback guess would be wrong
    toks = fresh(5 * 4)
    req = real_req(cache, toks, base)

    cache.cache_unfinished_req(req)
    hc.settle(cache)  # the write-through ack releases the backup's lock

    node = hc.path_nodes(cache, toks)[-1][0]
    assert req.last_node is node and node.lock_ref == 1
    assert md.get(node).first_owner == hc.oracle_first_owner(node, 4, 4) == base
    assert md.get(node).owner_counts() == hc.oracle_owner_counts(node, 4, 4)
    assert cache.rotation_base_of(node) == base
    cache.dec_lock_ref(node)


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
