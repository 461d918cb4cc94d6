"""A planned eviction on a ``UnifiedRadixCache``, as upstream's ``_evict_components`` evicts a victim.

Job: ``_evict_device_leaf`` per planned node; on write-back the D->H backup
(``_execute_and_commit_kv_backup``) then ``_demote``, or ``_drop_subtree_no_host``. Invariant: a node that
left upstream's evictable device leaves since planning is skipped (the caller's free counts catch a
shortfall). Cost: upstream's per-node eviction and one metrics update.
"""

from __future__ import annotations

import time
from typing import Sequence

from sglang_overlay.patches.cp_hicache_owner_lanes.report import logger
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.upstream import full as _full


def evict_planned(cache, nodes: Sequence) -> int:
    """Evict ``nodes`` (tree nodes, children before parents) as upstream's
    ``_evict_components`` evicts a victim; returns the Full tokens evicted."""
    start = time.perf_counter()
    tracker = {ct: 0 for ct in cache.tree_components}
    leaves = cache.tree_core.evictable_device_leaves
    for node in nodes:
        if node not in leaves:  # locked or gone since planning: the free-count check catches a shortfall
            continue
        backup_kv = cache._evict_device_leaf(node.id, tracker)
        if backup_kv is None:
            continue
        # Write-back: run the D->H backup, demote only on success (upstream's deferred demote).
        if cache._execute_and_commit_kv_backup(backup_kv, write_back=True) > 0:
            cache.writing_check(write_back=True)
            cache._demote(node.id, tracker)
        elif cache._drop_subtree_no_host(node.id, tracker):
            logger.warning(
                "write_back: KV subtree dropped without backup due to host memory pressure, "
                "root node %d (owner-lane eviction)",
                node.id,
            )
    if cache.is_write_back:
        cache.writing_check(write_back=True)
    cache.update_eviction_metrics(tracker[_full()], start)
    return tracker[_full()]
