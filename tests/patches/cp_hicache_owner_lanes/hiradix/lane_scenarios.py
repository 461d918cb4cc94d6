"""Scenarios the owner-lane tests build on upstream's real HiRadixCache (``hicache_cpu.py``), and their oracles.

Job: fresh token chains, one-page leaves in a chosen lane, chains evicted to host, pools drained until one
lane is short (``deficit_tree``, ``fill_lane_locked``), a load-back as the scheduler starts it (``load``), and
the checks a reloaded chain must pass. Invariant: the oracles read owners from the device indices alone
(never the patch's metadata), and every chain's tokens are new to the process (``fresh``). Cost: a few
inserts and one settle per leaf; milliseconds per scenario.
"""

from __future__ import annotations

import itertools

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc

_TOKENS = itertools.count(10_000, 7)


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
