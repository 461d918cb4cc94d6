"""The 0.5.23 host-backup gate per owner lane (AROUND ``UnifiedRadixCache._execute_kv_backup``).

Job: when every host lane the backup draws from (``_class_counts(phase % N, pages, N)``) has its pages, the
host pool group's ``available_size`` reads as at least the node's tokens for that one call
(:func:`.shadow.shadowed`), so upstream neither evicts nor refuses; otherwise upstream's gate and lane-blind
``evict_host`` run unchanged.
Invariant: the backup, its host slots and bookkeeping stay upstream's; the shadow is removed even when the
call raises. Cost per backup: a rotation-phase lookup, N lengths and a closed-form pages-per-lane count.
"""

from __future__ import annotations

from typing import List, Optional

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.shadow import shadowed
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of


def execute_kv_backup_hook(original, self, node_id, device_value, *args, **kwargs):
    """AROUND ``UnifiedRadixCache._execute_kv_backup(node_id, device_value, comp_xfers, sidecar_xfers)``."""
    group = _host_group(self)
    if group is None:
        return original(self, node_id, device_value, *args, **kwargs)
    tokens = len(device_value)
    if not lanes_have_room(self, node_id, tokens):
        return original(self, node_id, device_value, *args, **kwargs)
    real = group.available_size
    with shadowed(group, available_size=lambda: max(real(), tokens)):
        return original(self, node_id, device_value, *args, **kwargs)


def host_free_per_lane(cache) -> Optional[List[int]]:
    """Free host pages per lane of the KV host pool (None: not a page-interleaved host pool)."""
    slots = getattr(_kv_host_pool(cache), "_slots", None)
    counts = getattr(slots, "class_free_page_counts", None)
    return None if counts is None else counts()


def lanes_have_room(cache, node_id, tokens: int) -> bool:
    """Whether every lane the backup of ``node_id`` draws from has its pages on the host."""
    phase = cache.tree_core.rotation_phase_of(node_id)
    free = host_free_per_lane(cache)
    if phase is None or free is None:
        return False
    n = len(free)
    page = cache.page_size
    need = md.run_lane_pages(phase % n, -(-tokens // page), n)
    return all(f >= x for f, x in zip(free, need))


def _kv_host_pool(cache):
    controller = getattr(cache, "cache_controller", None)
    group = getattr(controller, "mem_pool_host", None)
    entry = getattr(group, "anchor_entry", None)
    return getattr(entry, "host_pool", None)


def _host_group(cache):
    """The host pool group whose gate this hook answers per lane, or None (the original runs)."""
    if state_of(cache) is None:
        return None
    entry = cache.cache_controller.mem_pool_host.anchor_entry
    from sglang.srt.mem_cache.pool_host.page_interleave import PageInterleaveHostPool

    if not isinstance(entry.host_pool, PageInterleaveHostPool):
        return None
    if entry.host_pool.shared_allocation_domain is not None and entry.host_evict_fn is not None:
        return None  # upstream skips its gate there
    return cache.cache_controller.mem_pool_host
