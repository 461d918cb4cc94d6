"""Owner-classed HiCache load-back under page-owner KV residency.

Upstream ``HiRadixCache.load_back`` asks the controller for a plain ``alloc()``
(which ``PageInterleavePoolAllocator`` refuses) and falls back to
``evict(num_tokens)``, which frees tokens by LRU regardless of owner. This
replacement, active only when the device allocator is page-interleaved:

1. computes the pages the evicted chain needs per owner lane from node metadata,
   as one cyclic run on the chain's rotation: the resident ancestor's base, so a
   host suffix stored under another base comes back congruent with its prefix;
2. plans owner-lane eviction on the CPU (:mod:`.planner`) and, if the plan covers
   every deficit, evicts exactly the planned leaves through upstream's own
   primitives (``_evict_backuped``/``_evict_regular`` on write-through,
   ``write_backup``/``_detach_backuped``/``_drop_subtree_no_host`` on write-back),
   so sizes, locks, host protection, kv events and metrics stay upstream's;
3. draws the chain's pages from their owner classes with upstream's
   ``alloc_extend`` (position-page ``P`` from class ``(b + P) % N``, all or
   nothing; the ancestor's real last slot feeds upstream's debug congruence
   check), queues the host-to-device copy on the controller's load queue and
   stamps the loaded nodes with the run they were allocated as.

If the plan cannot cover every deficit nothing is evicted, every lock and host
protection taken is released and the request proceeds as a cache miss.
"""

from __future__ import annotations

import logging
import time
from typing import Optional, Sequence

from sglang_overlay.patches.cp_hicache_owner_lanes import counters as ctr
from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, need_of, plan_owner_lane_eviction
from sglang_overlay.patches.cp_hicache_owner_lanes.state import ensure_meta, state_of

logger = logging.getLogger("sglang_overlay.patches.cp_hicache_owner_lanes")


def load_back_hook(original, self, node, mem_quota=None):
    state = state_of(self)
    if state is None:
        return original(self, node, mem_quota)
    return owner_classed_load_back(self, state, node, mem_quota)


# --------------------------------------------------------------------------- allocation


def chain_metas(cache, state, ancestor, nodes_to_load) -> list:
    """Metadata the loaded pages must have: one cyclic run that continues the chain.

    Under a resident ancestor the run takes the ancestor's rotation base (its
    metadata tracks its real pages), so the request's whole chain stays on one
    rotation even when the host nodes were stored under another base (the prefix
    was recomputed on a different rotation while they sat on host). From the
    root the run keeps the first node's own base. Host-only: Python attributes.
    """
    metas = [ensure_meta(cache, state, n) for n in nodes_to_load]
    if ancestor is cache.root_node:
        base = metas[0].rotation_base
    else:
        base = ensure_meta(cache, state, ancestor).rotation_base
    n = state.shard_size
    return [
        m if m.rotation_base == base else md.CpHiCacheNodeMetadata.for_chain(n, base, m.start_page, m.num_pages)
        for m in metas
    ]


def alloc_owner_classed(allocator, metas: Sequence, last_loc=None):
    """Device indices for ``metas``' pages, each page from its owner class; None if short.

    ``metas`` is one cyclic run (:func:`chain_metas`). Goes through upstream's
    ``alloc_extend`` as one "request": the run's rotation base as its base and
    its first position-page as its prefix, so the allocator's own per-class
    supply check makes it all or nothing. ``last_loc`` is the real device slot
    right before the run (the resident ancestor's last slot, a 1-element view:
    no sync); upstream reads it only in its debug congruence check, which then
    compares the run's base against the real pages, not against the metadata.
    """
    import torch

    first, ps = metas[0], allocator.page_size
    num_pages = 0
    for meta in metas:
        assert meta.start_page == first.start_page + num_pages, "load-back nodes are not one path"
        assert meta.rotation_base == first.rotation_base, "load-back run spans two rotations"
        num_pages += meta.num_pages
    prefix = torch.tensor([first.start_page * ps], dtype=torch.int64)
    seq = torch.tensor([(first.start_page + num_pages) * ps], dtype=torch.int64)
    if last_loc is None:
        last_loc = torch.zeros(1, dtype=torch.int64)  # a run from the root: never read
    return allocator.alloc_extend(
        prefix, prefix, seq, seq, last_loc, num_pages * ps, rotation_bases=[first.rotation_base]
    )


# --------------------------------------------------------------------------- eviction


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


# --------------------------------------------------------------------------- load-back


def _lanes(values) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def _timed_plan(cache, state, metas, free_before, last_hit_node):
    """Plan the owner-lane eviction for ``metas``; count it and warn when planning was slow."""
    counters = state.counters
    t0 = time.perf_counter()
    need = need_of(metas, state.shard_size)
    plan = plan_owner_lane_eviction(cache, need, free_before, state.index, state.shard_size)
    plan_ms = (time.perf_counter() - t0) * 1e3
    finish_plan(plan)
    if counters.record_plan(plan, plan_ms, state.slow_plan_ms):
        logger.warning(
            "owner-lane load-back: planning for node %d took %.2f ms (threshold %.2f ms, "
            "%d leaves scanned); need=%s free=%s deficit=%s",
            last_hit_node.id, plan_ms, state.slow_plan_ms, plan.scanned,
            _lanes(need), _lanes(free_before), _lanes(plan.deficit),
        )
    return need, plan


def _evict_for_plan(cache, state, plan, need, free_before, last_hit_node) -> bool:
    """Evict the plan's leaves; True when they freed less than planned (warned once here)."""
    if not plan.leaves:
        return False
    evict_planned(cache, plan.leaves)
    freed = [a - b for a, b in zip(state.allocator.class_free_page_counts(), free_before)]
    state.counters.record_eviction(freed, len(plan.leaves))
    if not any(f < p for f, p in zip(freed, plan.pages_per_lane)):
        return False
    state.counters.record_warning(ctr.WARN_SHORT_EVICTION)
    logger.warning(
        "owner-lane load-back: eviction for node %d freed less than planned: "
        "planned=%s freed=%s need=%s free=%s deficit=%s",
        last_hit_node.id, _lanes(plan.pages_per_lane), _lanes(freed),
        _lanes(need), _lanes(free_before), _lanes(plan.deficit),
    )
    return True


def _plan_evict_alloc(cache, state, metas, last_loc, last_hit_node):
    """Plan, evict what the plan chose, allocate by owner class: device indices or None."""
    counters = state.counters
    free_before = state.allocator.class_free_page_counts()
    need, plan = _timed_plan(cache, state, metas, free_before, last_hit_node)
    if not plan.covered:
        counters.record_warning(ctr.WARN_REFUSED)
        logger.warning(
            "owner-lane load-back: refused for node %d, deficit remains after planning: "
            "need=%s free=%s deficit=%s uncovered=%s (%d leaves scanned); nothing evicted",
            last_hit_node.id, _lanes(need), _lanes(free_before), _lanes(plan.deficit),
            _lanes(plan.remaining), plan.scanned,
        )
        return None

    warned_short = _evict_for_plan(cache, state, plan, need, free_before, last_hit_node)
    device_indices = alloc_owner_classed(state.allocator, metas, last_loc)
    if device_indices is None and not warned_short:
        counters.record_warning(ctr.WARN_SHORT_EVICTION)
        logger.warning(
            "owner-lane load-back: refused for node %d, classes still short after the "
            "planned eviction: need=%s free=%s deficit=%s",
            last_hit_node.id, _lanes(need), _lanes(state.allocator.class_free_page_counts()),
            _lanes(plan.deficit),
        )
    return device_indices


def owner_classed_load_back(cache, state, node, mem_quota: Optional[int] = None):
    last_hit_node = node
    nodes_to_load = []
    while node.evicted:
        assert node.backuped, "No backup available on evicted nodes, should not happen"
        nodes_to_load.insert(0, node)
        node = node.parent
    ancestor = node

    # protect the ancestor nodes from eviction
    delta = cache.inc_lock_ref(ancestor).delta
    num_tokens = sum(len(n.host_value) for n in nodes_to_load)
    if num_tokens < cache.load_back_threshold or (
        mem_quota is not None and num_tokens > mem_quota + delta
    ):
        cache.dec_lock_ref(ancestor)
        return None
    if cache._get_extra_pools():
        cache.dec_lock_ref(ancestor)
        raise RuntimeError(
            "cp-hicache-owner-lanes: owner-classed load-back supports the KV pool only; "
            "this cache has extra host pools (hybrid controller). Disable the patch "
            "(SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes) or the page-interleaved allocator."
        )

    for n in nodes_to_load:
        n.protect_host()
    try:
        metas = chain_metas(cache, state, ancestor, nodes_to_load)
        last_loc = None if ancestor is cache.root_node else ancestor.value[-1:]
        device_indices = _plan_evict_alloc(cache, state, metas, last_loc, last_hit_node)
    except BaseException:
        for n in nodes_to_load:
            n.release_host()
        cache.dec_lock_ref(ancestor)
        raise

    cache.dec_lock_ref(ancestor)
    if device_indices is None:
        for n in nodes_to_load:
            n.release_host()
        state.counters.record_outcome(False)
        return None

    commit_load(cache, nodes_to_load, last_hit_node, device_indices, metas)
    state.counters.record_outcome(True)
    return device_indices


def commit_load(cache, nodes_to_load, last_hit_node, device_indices, metas=None) -> None:
    """Upstream's load-back tail: queue the host-to-device copy on the controller,
    point the nodes at their new device indices (stamped with ``metas``, the run
    they were allocated as), publish, lock the hit node."""
    import torch
    from sglang.srt.disaggregation.kv_events import StorageMedium
    from sglang.srt.managers.cache_controller import CacheOperation

    host_indices = torch.cat([n.host_value for n in nodes_to_load])
    cache.cache_controller.load_queue.append(
        CacheOperation(host_indices, device_indices, last_hit_node.id)
    )
    for n in nodes_to_load:
        n.release_host()
    cache.ongoing_load_back[last_hit_node.id] = last_hit_node
    offset = 0
    for i, n in enumerate(nodes_to_load):
        if metas is not None:
            md.put(n, metas[i])
        n.value = device_indices[offset : offset + len(n.host_value)].clone()
        offset += len(n.host_value)
        cache.kv_events.record_store(n, medium=StorageMedium.GPU)
    cache.evictable_size_ += len(device_indices)
    cache.inc_lock_ref(last_hit_node)
