"""Per-cache state on a page-interleaved ``UnifiedRadixCache``: allocator, leaf index, counters.

Job: build the state once per cache under :data:`..cache_state.STATE_ATTR` when the Full allocator is a
``PageInterleavePoolAllocator`` and the tree is the Python ``UnifiedTreeCore`` with FULL only (otherwise
``INERT``, with one warning when page-interleaved). Invariant: the leaf index follows upstream's
``evictable_device_leaves`` set, rebuilt when ``reset()`` rebinds it. Cost: one dict lookup after the first call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sglang_overlay.patches.cp_hicache_owner_lanes import cache_state, settings
from sglang_overlay.patches.cp_hicache_owner_lanes.counters import OwnerLaneCounters
from sglang_overlay.patches.cp_hicache_owner_lanes.leaf_index import LeafOrderIndex, NotifyingLeafSet, is_monotone
from sglang_overlay.patches.cp_hicache_owner_lanes.report import logger
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.upstream import full as _full

if TYPE_CHECKING:  # annotations only: importing this module imports no upstream
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator


class LaneState:
    """What the hook keeps per page-interleaved cache: allocator, leaf index, counters."""

    def __init__(self, cache, allocator: "PageInterleavePoolAllocator"):
        self.allocator = allocator
        self.shard_size = allocator.shard_size  # lanes (N): upstream's name for the count
        self.page_size = allocator.page_size  # tokens per page (the physical page: the tree's quantum)
        full = cache.tree_core.components_by_type[_full()]
        full._ensure_eviction_strategy()
        # Upstream's Full walk orders leaves by this (session-aware when sessions are on).
        self.priority = full.session_ref_eviction_strategy
        self.monotone = not cache.enable_session_radix_cache and is_monotone(cache.tree_core.eviction_strategy)
        self.counters = OwnerLaneCounters(self.shard_size)
        if getattr(cache, "metrics_collector", None) is not None:
            self.counters.bind_collector(cache.metrics_collector)
        self.slow_plan_ms = settings.slow_plan_ms()  # milliseconds: a slower plan logs one warning
        self._leaves = None
        self._index: Optional[LeafOrderIndex] = None

    def leaf_index(self, tree_core) -> Optional[LeafOrderIndex]:
        """The lazy heap over upstream's device-leaf set (None: non-monotone priorities)."""
        if not self.monotone:
            return None
        leaves = tree_core.evictable_device_leaves
        if leaves is not self._leaves:  # first plan, or reset() rebound the set
            if not isinstance(leaves, NotifyingLeafSet):
                leaves = NotifyingLeafSet(leaves)
                tree_core.evictable_device_leaves = leaves
            self._index = LeafOrderIndex(leaves, self.priority, True)
            leaves.on_add = self._index.note
            self._leaves = leaves
        return self._index


def state_of(cache) -> Optional[LaneState]:
    """The cache's state, created on first use; None when the patch does not act on it."""
    return cache_state.state_of(cache, _build)


def _interleaved_allocator(cache):
    """The cache's Full allocator (what the controller's load uses) when it is page-interleaved, else None."""
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    allocator = cache.token_to_kv_pool_allocator
    allocator = getattr(allocator, "full_attn_allocator", allocator)
    return allocator if isinstance(allocator, PageInterleavePoolAllocator) else None


def _build(cache):
    state = cache_state.INERT
    allocator = _interleaved_allocator(cache)
    if allocator is not None:
        reason = _unsupported(cache)
        if reason is None:
            state = LaneState(cache, allocator)
        else:  # refused at start-up (startup.py) where the hook was applied at construction
            logger.warning(
                "owner-lane load-back inactive on this page-interleaved cache (%s): upstream's "
                "lane-blind load-back gate applies",
                reason,
            )
    return state


def unplannable(cache) -> Optional[str]:
    """Why the planner cannot serve ``cache`` although its Full allocator is page-interleaved; None when it
    can, or when the allocator is not page-interleaved (the patch has nothing to do there)."""
    return None if _interleaved_allocator(cache) is None else _unsupported(cache)


def _unsupported(cache) -> Optional[str]:
    tree_core = cache.tree_core
    if not hasattr(tree_core, "evictable_device_leaves") or not hasattr(tree_core, "node_by_id"):
        return (
            f"tree core {type(tree_core).__name__} is not the Python UnifiedTreeCore "
            "(set SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python)"
        )
    if tuple(cache.tree_components) != (_full(),):
        names = [ct.name for ct in cache.tree_components]
        return (
            f"tree components {names}: only FULL is planned per lane, not the hybrid (Mamba / SWA) device and "
            "host pools"
        )
    return None
