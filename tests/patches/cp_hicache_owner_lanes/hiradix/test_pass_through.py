"""Where the patch stays out, upstream runs as is: one lane, a plain RadixCache, the root, a foreign object.

cp-hicache-owner-lanes on upstream's real HiRadixCache, PageInterleavePoolAllocator, HiCacheController and
host pool (CPU; only the copy engine is a stand-in). Invariant: with N = 1 (upstream's paged allocator)
there is no state, metadata or counter and upstream's load_back reloads the rows; a RadixCache keeps
upstream's leaf status; ``rotation_base_of`` answers from metadata only for a stamped node of a
page-interleaved cache, every other call reaching upstream with its own arguments. Cost: under a second.
"""

from __future__ import annotations

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of
from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc
from tests.patches.cp_hicache_owner_lanes.hiradix.lane_scenarios import (
    fresh,
    leaf_chain,
    load,
)

pytestmark = pytest.mark.usefixtures("overlay")  # the overlay applied once per module (conftest.py)


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
