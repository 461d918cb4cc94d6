"""cp-hicache-owner-lanes on sglang 0.5.23: the host-backup gate per owner lane.

Model. Under ``--enable-kv-cache-sharding`` the host pool is classed too
(``PageInterleaveHostPool``: a ``PageInterleavePoolAllocator`` over this rank's host rows),
and a backup draws its host slots with ``alloc_cyclic`` from the node's rotation phase,
i.e. ``_class_counts(phase % N, pages, N)`` pages per lane. Upstream's gate in
``UnifiedRadixCache._execute_kv_backup`` asks the host pool's ``available_size()``
(N x page x the *smallest* lane's free pages) and, when that is below the node's tokens,
calls lane-blind LRU ``evict_host(needed)`` once and gives the backup up if it freed less.
So one full host lane refuses every backup, into whichever lanes, while nothing of that
lane is evictable, and otherwise evicts a host node for a backup whose lanes had room
(``docs/rebase-0.5.23/probe_host_backup.out``: 0 of 18 backups with host lane 0 held; 1
needless host eviction over 30 backups with it cached).

What this hook does (AROUND ``UnifiedRadixCache._execute_kv_backup``), only on a cache
the load-back hook acts on (:func:`.v0_5_23.state_of`) whose KV host pool is a
``PageInterleaveHostPool`` without a shared allocation domain (upstream's own gate
condition), for a node with a rotation phase; anything else runs the original unchanged:
when every lane the backup draws from has the pages, the host pool's ``available_size``
reads as at least the node's tokens for this one call, so upstream neither evicts nor
refuses, and its own ``cache_controller.write`` (``alloc_cyclic``) follows. When a lane it
draws from is short, upstream's gate and lane-blind ``evict_host`` run as they are.

Invariants: the backup itself, its host slots and its bookkeeping stay upstream's; the
shadow is an instance attribute of the host pool group for the duration of the call,
removed even when the call raises; host free pages per lane are read from the classed
allocator's per-lane lengths (no tensor data, no sync).

Cost: per backup on an acting cache, one rotation-phase lookup (upstream computes it in
the same call), N lengths and a closed-form class count. Logging: none.

Usage (the declaration)::

    Target("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache._execute_kv_backup",
           "sglang_overlay.patches.cp_hicache_owner_lanes.v0_5_23_host_backup:execute_kv_backup_hook",
           "AROUND", upstream=">=0.5.23")

Exit condition: drop when upstream's backup gate asks the lanes the backup draws from
(``_execute_kv_backup`` stops comparing the min-lane ``available_size()``).
"""

from __future__ import annotations

from typing import List, Optional

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes import v0_5_23 as v23

_MISSING = object()


def execute_kv_backup_hook(original, self, node_id, device_value, *args, **kwargs):
    """AROUND ``UnifiedRadixCache._execute_kv_backup(node_id, device_value, comp_xfers, sidecar_xfers)``."""
    group = _host_group(self)
    if group is None:
        return original(self, node_id, device_value, *args, **kwargs)
    tokens = len(device_value)
    if not lanes_have_room(self, node_id, tokens):
        return original(self, node_id, device_value, *args, **kwargs)
    saved = group.__dict__.get("available_size", _MISSING)
    real = group.available_size
    group.__dict__["available_size"] = lambda: max(real(), tokens)
    try:
        return original(self, node_id, device_value, *args, **kwargs)
    finally:
        if saved is _MISSING:
            group.__dict__.pop("available_size", None)
        else:
            group.__dict__["available_size"] = saved


def host_free_per_lane(cache) -> Optional[List[int]]:
    """Free host pages per owner lane of the KV host pool (None: not a classed host pool)."""
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
    need = md.class_counts(phase % n, -(-tokens // page), n)
    return all(f >= x for f, x in zip(free, need))


def _kv_host_pool(cache):
    controller = getattr(cache, "cache_controller", None)
    group = getattr(controller, "mem_pool_host", None)
    entry = getattr(group, "anchor_entry", None)
    return getattr(entry, "host_pool", None)


def _host_group(cache):
    """The host pool group whose gate this hook answers per lane, or None (the original runs)."""
    if v23.state_of(cache) is None:
        return None
    entry = cache.cache_controller.mem_pool_host.anchor_entry
    from sglang.srt.mem_cache.pool_host.page_interleave import PageInterleaveHostPool

    if not isinstance(entry.host_pool, PageInterleaveHostPool):
        return None
    if entry.host_pool.shared_allocation_domain is not None and entry.host_evict_fn is not None:
        return None  # upstream skips its gate there
    return cache.cache_controller.mem_pool_host
