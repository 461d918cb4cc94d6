"""A chain keeps its rotation: load-backs under a resident prefix, and the request's base at cache time.

cp-hicache-owner-lanes on upstream's real HiRadixCache, PageInterleavePoolAllocator, HiCacheController and
host pool (CPU; only the copy engine is a stand-in). Invariant: position-page P of a chain sits in lane
(b + P) % N after any load-back (under a resident prefix, a recomputed one on another rotation, or an
unstamped one: derived first), and ``cache_finished_req`` / ``cache_unfinished_req`` stamp upstream's real
Req's ``kv_rotation_base``, not the least-full guess (the hooks' own contract: ``test_request_hooks.py``).
Cost: under a second.
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
    evicted_suffix,
    fresh,
    leaf_chain,
    load,
    page_owners_along,
)

pytestmark = pytest.mark.usefixtures("overlay")  # the overlay applied once per module (conftest.py)


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
