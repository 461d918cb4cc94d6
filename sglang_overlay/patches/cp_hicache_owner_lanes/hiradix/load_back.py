"""Owner-classed ``HiRadixCache.load_back`` under a page-interleaved allocator (AROUND).

Job: need per lane of the chain's run, a CPU plan (:mod:`..planner`) covering every deficit, the planned
eviction, the run's pages from their owner classes, the load queued as upstream queues it, the loaded
nodes stamped. Invariant: an uncovered plan evicts nothing, releases every lock and host protection, and
the request proceeds as a cache miss. Cost: the planner's scan, the evictions, one ``alloc_extend``.
"""

from __future__ import annotations

import time
from typing import Optional

from sglang_overlay.patches.cp_hicache_owner_lanes import counters as ctr
from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.allocation import alloc_owner_classed, chain_metas
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, need_of, plan_owner_lane_eviction
from sglang_overlay.patches.cp_hicache_owner_lanes.report import lanes, logger


def load_back_hook(original, self, node, mem_quota=None):
    state = state_of(self)
    if state is None:
        return original(self, node, mem_quota)
    return owner_classed_load_back(self, state, node, mem_quota)


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
            last_hit_node.id,
            plan_ms,
            state.slow_plan_ms,
            plan.scanned,
            lanes(need),
            lanes(free_before),
            lanes(plan.deficit),
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
        last_hit_node.id,
        lanes(plan.pages_per_lane),
        lanes(freed),
        lanes(need),
        lanes(free_before),
        lanes(plan.deficit),
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
            last_hit_node.id,
            lanes(need),
            lanes(free_before),
            lanes(plan.deficit),
            lanes(plan.remaining),
            plan.scanned,
        )
        return None

    warned_short = _evict_for_plan(cache, state, plan, need, free_before, last_hit_node)
    device_indices = alloc_owner_classed(state.allocator, metas, last_loc)
    if device_indices is None and not warned_short:
        counters.record_warning(ctr.WARN_SHORT_EVICTION)
        logger.warning(
            "owner-lane load-back: refused for node %d, classes still short after the "
            "planned eviction: need=%s free=%s deficit=%s",
            last_hit_node.id,
            lanes(need),
            lanes(state.allocator.class_free_page_counts()),
            lanes(plan.deficit),
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
    if num_tokens < cache.load_back_threshold or (mem_quota is not None and num_tokens > mem_quota + delta):
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
    cache.cache_controller.load_queue.append(CacheOperation(host_indices, device_indices, last_hit_node.id))
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
