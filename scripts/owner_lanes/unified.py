"""The 0.5.23 (unified) adapter of the owner-lane benchmarks: load-back and capacity, hooked against upstream.

Load-back: one call of ``UnifiedRadixCache._load_back_transfers`` hooked by the release's target (the owner-lane
plan, evict the plan, upstream's own ``alloc_cyclic`` load) against the same call unhooked (upstream's gate:
``available_size()``, i.e. the tightest lane, filled by lane-blind LRU ``evict_for_alloc``, then the same load).
The same sequence of load-backs runs on both sides' trees (``cache.load_back``, whose ``_load_back_transfers`` is
the timed call; the H2D copy is settled after each call and the loaded prefix matched once, as the request that
loaded it would, both outside the timing). Planning (``unified.planning.plan_load_back``, the call the gate
makes) runs alone just before each timed call, on the same state: timed from here (``planning_ms_patch``, the
median), under the tensor-op counter and on CUDA under ``set_sync_debug_mode("error")`` (a host sync raises).
The patch keeps no duration: this adapter measures planning from outside. The leaf index is built once per
cache, timed apart.

Capacity: one ``allocator.evict_to_free_tokens(tree_cache, num_tokens)`` call (before every paged extend and
decode allocation) hooked against upstream's (``evict_for_alloc`` for the min-lane floor's shortfall, then
``_evict_until_allocatable``), on the same trees without load targets; each call asks ``k`` pages per lane
(``k`` 1-3 from the seed); after it, running requests take back what it freed (outside the timing).

Invariant: both sides see identical trees and call sequences; only the hooked call is timed.
Cost: two tree builds per size (O(leaves)) and two O(device nodes) snapshots per call, untimed.
"""

from __future__ import annotations

import functools
import gc
import random
import statistics
import time

from . import hook_of, schema
from . import unified_trees as trees
from .tally import Tally, coverable

N, PS = trees.N, trees.PS
TIMED_CALL = "UnifiedRadixCache._load_back_transfers"
CAPACITY_TARGET = "BaseTokenToKVPoolAllocator.evict_to_free_tokens"
UPSTREAM_PATH = "the same call unhooked: min-lane available_size() gate filled by LRU evict_for_alloc"
CAPACITY_UPSTREAM_PATH = "the same call unhooked: min-lane floor by evict_for_alloc + _evict_until_allocatable"
_TREE = (
    f"UnifiedRadixCache, N={N}, page {PS}, write-through; 3% of leaves locked, 30% one-page children; lanes "
    f"{list(trees.SHORT_LANES)} drained by running requests, the others left"
)
WORKLOAD = f"{_TREE} 2 x loads + 4 free pages; 3-10 page chains loaded back from host"
CAPACITY_WORKLOAD = f"{_TREE} {trees.headroom(0)} free pages; each call asks 1-3 pages per lane"
NOT_MEASURED = {
    "host_syncs_per_load_patch": "this release's adapter counts host syncs during planning only",
    "host_syncs_per_load_upstream": "this release's adapter counts host syncs during planning only",
}
CHART_CURVES = ()


def prepare(device: str) -> None:
    """Nothing to apply: each side calls its function directly (the hook from the registry, or upstream's)."""


def release_detail(quick: bool, seed: int, device: str) -> dict:
    return {"short_lanes": list(trees.SHORT_LANES)}


def capacity_detail() -> dict:
    return {"short_lanes": list(trees.SHORT_LANES)}


def report_detail(console, result) -> None:
    builds = ", ".join(f"{r['index_build_ms_patch']:.1f}" for r in result["sizes"].values())
    console.print(f"leaf index build (once per cache, not in the per-call times), ms: {builds}")


def _unwrapped(owner, name):
    original = owner.__dict__[name]
    return getattr(original, "__wrapped__", original)


def _sync(device: str):
    if device != "cuda":
        return None
    import torch

    return torch.cuda.synchronize


def _planning_counted(plan, cuda: bool):
    """``plan()`` under the tensor-op counter (on CUDA also under ``set_sync_debug_mode("error")``), and its
    duration in milliseconds, timed here around the call (the patch keeps none)."""
    import torch

    from tests.support.hicache_tensor_count import count_tensor_work

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
    try:
        with count_tensor_work() as work:
            t = time.perf_counter()
            plan()
            ms = (time.perf_counter() - t) * 1e3
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
    return work, ms


def _index_build_ms(h, state) -> float:
    t = time.perf_counter()
    state.leaf_index(h.tree)
    return (time.perf_counter() - t) * 1e3


def _load_side(release, patch: bool, num_leaves: int, num_loads: int, seed: int, device: str):
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import plan_load_back
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of

    t0 = time.perf_counter()
    h, loads = trees.build_tree(num_leaves, num_loads, seed, device)
    out = {"leaves": len(h.tree.evictable_device_leaves), "build_s": time.perf_counter() - t0}
    cache, tally, sync = h.cache, Tally(), _sync(device)
    original = _unwrapped(UnifiedRadixCache, "_load_back_transfers")
    call = (
        functools.partial(hook_of(release, TIMED_CALL), original, cache)
        if patch
        else functools.partial(original, cache)
    )

    def timed(**kwargs):
        with tally.clock(sync):
            return call(**kwargs)  # noqa: F821 (deleted only after the last call, below)

    cache._load_back_transfers = timed  # instance attribute: this cache only
    state = state_of(cache) if patch else None
    tensor_ops = syncs = 0
    plan_ms: list = []
    if patch:
        out["index_build_ms"] = _index_build_ms(h, state)
    for node_id, keys in loads:
        before = trees.device_lanes(h)
        need, _ = trees.load_need(h, node_id)
        free = h.alloc.class_free_page_counts()
        deficit = [max(0, a - b) for a, b in zip(need, free)]
        can = coverable(before, set(h.path_nodes(node_id)), trees.locked, deficit)
        if patch:
            plan = functools.partial(plan_load_back, cache, state, node_id, free=free)
            work, ms = _planning_counted(plan, device == "cuda")
            tensor_ops, syncs = tensor_ops + work.total, syncs + work.host_syncs
            plan_ms.append(ms)
        loaded = cache.load_back(node_id)
        if loaded:
            h.settle()
            h.match(keys)  # the request that loaded it runs and ends: the chain is now the MRU one
        tally.record(loaded, can, deficit, before, trees.device_lanes(h))
    assert tally.calls == len(tally.times) == len(loads), (tally.calls, len(tally.times), len(loads))
    out.update(figures=tally.figures(), tensor_ops=tensor_ops, host_syncs=syncs)
    out["planning_ms"] = statistics.median(plan_ms) if plan_ms else None
    cache.__dict__.pop("_load_back_transfers", None)  # one tree alive at a time: free this one first
    del h, cache, call, timed
    gc.collect()
    return out


def _row(which: schema.Schema, p: dict, u: dict, not_measured: dict, **more) -> dict:
    """The schema's row from both sides' runs (``more``: the figures only this benchmark has)."""
    assert p["leaves"] == u["leaves"]
    figures = {
        **schema.sides(which, p["figures"], u["figures"]),
        "leaves": p["leaves"],
        "build_s": round(p["build_s"] + u["build_s"], 2),
        "index_build_ms_patch": p["index_build_ms"],
        "tensor_ops_planning": p["tensor_ops"],
        "host_syncs_planning": p["host_syncs"],
        **more,
    }
    return schema.size_row(which, figures, not_measured, {})


def bench_size(release, num_leaves: int, num_loads: int, seed: int, device: str = "cpu") -> dict:
    p = _load_side(release, True, num_leaves, num_loads, seed, device)
    u = _load_side(release, False, num_leaves, num_loads, seed, device)
    return _row(schema.LOAD_BACK, p, u, NOT_MEASURED, loads=num_loads, planning_ms_patch=p["planning_ms"])


def refill_shortage(h) -> None:
    """Running requests take what the call freed: lanes 2 and 5 empty again, the rest back to the headroom."""
    free, room = h.alloc.class_free_page_counts(), trees.headroom(0)
    for lane in range(N):
        h.hold(lane, free[lane] - (0 if lane in trees.SHORT_LANES else min(free[lane], room)))


def _capacity_side(release, patch: bool, num_leaves: int, calls: int, seed: int, device: str):
    from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator

    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import plan_lanes
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of

    t0 = time.perf_counter()
    h, _ = trees.build_tree(num_leaves, 0, seed, device)
    out = {"leaves": len(h.tree.evictable_device_leaves), "build_s": time.perf_counter() - t0}
    original = _unwrapped(BaseTokenToKVPoolAllocator, "evict_to_free_tokens")
    hook = hook_of(release, CAPACITY_TARGET)
    call = functools.partial(hook, original, h.alloc) if patch else functools.partial(original, h.alloc)
    state, tally, sync = state_of(h.cache), Tally(), _sync(device)
    if patch:
        out["index_build_ms"] = _index_build_ms(h, state)
    rng = random.Random(seed)
    tensor_ops = syncs = 0
    for _ in range(calls):
        k = rng.randint(1, 3)
        num_tokens = k * N * PS
        before = trees.device_lanes(h)
        free = h.alloc.class_free_page_counts()
        deficit = [max(0, k - f) for f in free]
        if patch:
            work, _ = _planning_counted(functools.partial(plan_lanes, h.cache, state, [k] * N, free), device == "cuda")
            tensor_ops, syncs = tensor_ops + work.total, syncs + work.host_syncs
        with tally.clock(sync):
            call(h.cache, num_tokens)
        tally.record(h.alloc.available_size() >= num_tokens, True, deficit, before, trees.device_lanes(h))
        refill_shortage(h)
    out.update(figures=tally.figures(), tensor_ops=tensor_ops, host_syncs=syncs)
    out.update(plans=state.counters.capacity_plans, fallbacks=state.counters.capacity_fallbacks)
    del h, call
    gc.collect()
    return out


def capacity_size(release, num_leaves: int, calls: int, seed: int, device: str = "cpu") -> dict:
    p = _capacity_side(release, True, num_leaves, calls, seed, device)
    u = _capacity_side(release, False, num_leaves, calls, seed, device)
    return _row(schema.CAPACITY, p, u, {}, calls=calls, capacity_plans_patch=p["plans"],
                capacity_fallbacks_patch=p["fallbacks"])  # fmt: skip
