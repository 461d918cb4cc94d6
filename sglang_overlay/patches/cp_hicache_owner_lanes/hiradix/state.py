"""Per-cache state on a page-interleaved ``HiRadixCache``, and metadata for never-stamped nodes.

Job: the allocator, the leaf index (upstream's ``evictable_leaves`` becomes a notifying set), the counters
and the slow-plan threshold, kept under :data:`..cache_state.STATE_ATTR`; any other cache is ``INERT``.
Invariant: a node without metadata continues its parent's phase; a chain from the root takes the
allocator's least-full class (``alloc_extend``'s rule). Cost: Python attributes only, no tensor.
"""

from __future__ import annotations

import sys
from typing import Optional

from sglang_overlay.patches.cp_hicache_owner_lanes import cache_state, settings
from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.counters import OwnerLaneCounters
from sglang_overlay.patches.cp_hicache_owner_lanes.leaf_index import LeafOrderIndex, NotifyingLeafSet, is_monotone


class OwnerLaneState:
    def __init__(self, cache, allocator):
        self.allocator = allocator
        self.shard_size = allocator.shard_size
        self.page_size = cache.page_size
        # Upstream keeps this one set object for the cache's life (reset() clears it).
        leaves = NotifyingLeafSet(cache.evictable_leaves)
        cache.evictable_leaves = leaves
        self.index = LeafOrderIndex(leaves, cache.eviction_strategy.get_priority, is_monotone(cache.eviction_strategy))
        leaves.on_add = self.index.note
        self.counters = OwnerLaneCounters(self.shard_size)
        collector = getattr(cache, "metrics_collector", None)
        if collector is not None:
            self.counters.bind_collector(collector)
        self.slow_plan_ms = settings.slow_plan_ms()


def state_of(cache) -> Optional[OwnerLaneState]:
    """The cache's state, created on first use; None when not page-interleaved."""
    return cache_state.state_of(cache, _build)


def _build(cache):
    if "evictable_leaves" not in cache.__dict__:
        return None  # still inside upstream's __init__
    hiradix = sys.modules.get("sglang.srt.mem_cache.hiradix_cache")
    if hiradix is None:  # no HiRadixCache can exist in this process yet
        return None
    HiRadixCache = hiradix.HiRadixCache
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    allocator = getattr(cache, "token_to_kv_pool_allocator", None)
    if not isinstance(cache, HiRadixCache) or not isinstance(allocator, PageInterleavePoolAllocator):
        return cache_state.INERT
    return OwnerLaneState(cache, allocator)


def node_pages(node, page_size: int) -> int:
    return len(node.key) // page_size


def ensure_meta(cache, state: OwnerLaneState, node) -> md.CpHiCacheNodeMetadata:
    """Metadata of ``node``, deriving any missing link by chain continuation.

    Rule for nodes that were never stamped (created before the patch took, or by
    a path that carries no rotation base such as a storage prefetch): a node
    continues its parent's phase; a chain that starts at the root takes the
    allocator's least-full class, the rule ``alloc_extend`` applies to a new
    chain. The walk up and back down touches only Python attributes.
    """
    meta = md.get(node)
    if meta is not None:
        return meta
    chain = []
    cur = node
    while cur is not cache.root_node and cur is not None and md.get(cur) is None:
        chain.append(cur)
        cur = cur.parent
    parent_meta = None if cur is cache.root_node or cur is None else md.get(cur)
    for n in reversed(chain):
        pages = node_pages(n, state.page_size)
        if parent_meta is None:
            meta = md.CpHiCacheNodeMetadata.for_chain(state.shard_size, state.allocator.least_full_class(), 0, pages)
        else:
            meta = parent_meta.continuation(pages)
        md.put(n, meta)
        parent_meta = meta
    return md.get(node)
