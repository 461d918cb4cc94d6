"""A planned eviction on a ``HiRadixCache``, through upstream's own eviction primitives.

Job: evict exactly the planned nodes, in order (``_evict_backuped``/``_evict_regular`` on write-through;
``write_backup``, ``_detach_backuped``, ``writing_check``, ``_drop_subtree_no_host`` on write-back), so
sizes, locks, host protection, kv events and metrics stay upstream's. Invariant: a node that is no longer
evictable (locked, evicted, or with a device child) is skipped. Cost: upstream's per-node eviction.
"""

from __future__ import annotations

import time
from typing import Sequence


def evict_planned(cache, leaves: Sequence) -> int:
    """Evict exactly ``leaves`` (in order) through upstream's eviction primitives."""
    start = time.perf_counter()
    if cache.cache_controller.write_policy == "write_back":
        num_evicted = _evict_write_back(cache, leaves)
    else:
        num_evicted = _evict_write_through(cache, leaves)
    cache.update_eviction_metrics(num_evicted, start)
    return num_evicted


def _evictable(node) -> bool:
    return node.lock_ref == 0 and not node.evicted and all(c.evicted for c in node.children.values())


def _evict_write_through(cache, leaves) -> int:
    num_evicted = 0
    for x in leaves:
        if not _evictable(x):
            continue
        if x.backuped:
            num_evicted += cache._evict_backuped(x)
        else:
            num_evicted += cache._evict_regular(x)
    return num_evicted


def _evict_write_back(cache, leaves) -> int:
    num_evicted = 0
    staged = []

    def flush_staged() -> None:
        if not staged:
            return
        cache.writing_check(write_back=True)
        for node, device_indices in staged:
            cache.cache_controller.evict_device(device_indices)
            node.release_host()
        staged.clear()

    for x in leaves:
        if not _evictable(x):
            continue
        if x.backuped:
            num_evicted += cache._evict_backuped(x)
        elif cache.write_backup(x, write_back=True) > 0:
            x.protect_host()
            staged.append((x, x.value))
            num_evicted += cache._detach_backuped(x)
        else:
            flush_staged()
            num_evicted += cache._drop_subtree_no_host(x)
    flush_staged()
    return num_evicted
