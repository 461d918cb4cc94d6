"""Node metadata against the oracle: what inserts, splits and re-pointing stamp on the real tree.

cp-hicache-owner-lanes on upstream's real HiRadixCache, PageInterleavePoolAllocator, HiCacheController and
host pool (CPU; only the copy engine is a stand-in). Invariant: every node's first owner, owner counts and
position equal what its device indices say (host-only and split nodes included, over N, page size and
write policy); a base-less insert continues the parent's chain or takes the least-full lane, unstamped
nodes are derived top-down, each key namespace is its own chain. Cost: about 3 s (the 18-case matrix).
"""

from __future__ import annotations

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of
from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc
from tests.patches.cp_hicache_owner_lanes.hiradix.lane_scenarios import (
    assert_chain_congruent,
    assert_reloaded,
    deficit_tree,
    evicted_target,
    fresh,
    load,
)

pytestmark = pytest.mark.usefixtures("overlay")  # the overlay applied once per module (conftest.py)


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
