"""The pre-0.5.23 (hiradix) adapter of the owner-lane load-back benchmark: the patch's whole path against upstream's.

On the same trees (``hiradix_trees.Tree``, same seed) and the same requests in the same order, each side on its
own copy of the tree: the patch's ``HiRadixCache.load_back`` (plan + evict + owner-classed allocation + the load
queued, hooked by ``sglang_overlay.apply()``) against upstream's path (allocate, ``evict(num_tokens)``, allocate
again, the load queued; ``hiradix_trees.upstream_fallback_load_back``), each timed from call to return; the H2D
settle and the snapshots are outside both. Planning alone is timed beside it on the patch's tree, with the
baselines (b) and (b') of ``hiradix_baselines``, and counted (tensor ops, host syncs) on the same state. Host
syncs of the whole path are counted on ``COUNTED`` extra requests per tree that are not timed (``--device cuda``:
real syncs through ``torch.cuda.set_sync_debug_mode``; cpu: ``aten._local_scalar_dense``, the op behind every
device-to-host read). ``release_detail`` adds the shared-KV replay.

Invariant: both sides see identical trees and requests; upstream as shipped loads nothing (``alloc()`` raises on
this allocator), so its path gets the patch's owner-classed allocation and nothing else of the patch.
Cost: two tree builds per size, O(leaves); per request the baseline (b) walks every evictable leaf (timed apart)
and two O(device nodes) snapshots (untimed).
"""

from __future__ import annotations

import gc
import statistics
import time

from . import schema
from .hiradix_baselines import bound_violated, fork_tensor_plan, redundant_leaves, replay, same_walk_tensor_plan
from .hiradix_trees import PS, N, SyncCounter, Tree, device_lanes, locked, path_of, upstream_fallback_load_back
from .tally import Tally, coverable, pct

COUNTED = 2  # extra requests per tree, run with sync counting, never timed
TIMED_CALL = "HiRadixCache.load_back"
UPSTREAM_PATH = "allocate, evict(num_tokens) by LRU, allocate again (owner-classed: alloc() raises here)"
WORKLOAD = (
    f"HiRadixCache, N={N}, page {PS}, write-back; shared prompts with 1-3 page leaves, 16-32 page histories on "
    "host; every lane filled to 0-2 free pages (drawn per lane)"
)
NOT_MEASURED = {
    "index_build_ms_patch": "this release keeps its leaf index from the cache's first insert on: no build to time",
}
CHART_CURVES = (
    ("same_walk_tensor_ms_median", "(b') same walk, tensor counts"),
    ("tensor_plan_ms_median", "(b) fork: full heap + tensor counts"),
    ("upstream_evict_ms_median", "(c) upstream evict(num_tokens) alone"),
)


def prepare(device: str) -> None:
    """The patch's hooks in this process (load_back, the metadata stamping): ``sglang_overlay.apply()``."""
    import sglang_overlay

    sglang_overlay.apply()


def _sync(device: str):
    if device != "cuda":
        return None
    import torch

    return torch.cuda.synchronize


def _ms(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t) * 1e3


def _patch_side(tree: Tree, loads: int, device: str):
    from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of
    from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, need_of, plan_owner_lane_eviction
    from tests.support.hicache_tensor_count import count_tensor_work

    cache, state = tree.cache, state_of(tree.cache)
    alloc, tally, sync = cache.token_to_kv_pool_allocator, Tally(), _sync(device)
    d = {k: [] for k in ("plan", "tensor", "same_walk", "scanned", "tensor_scanned", "amp", "damp", "redundant")}
    tensor_ops = syncs = whole_syncs = violations = 0
    for i, target in enumerate(tree.targets):
        hit, metas, ancestor = tree.chain(target)
        need, free = need_of(metas, N), alloc.class_free_page_counts()
        deficit = [max(0, a - b) for a, b in zip(need, free)]
        if i < loads:  # planning alone, and the baselines, on the same state
            plan, ms = _ms(plan_owner_lane_eviction, cache, need, free, state.index, N)
            finish_plan(plan)
            d["plan"].append(ms)
            d["scanned"].append(plan.scanned)
            (_, scanned, _), ms = _ms(fork_tensor_plan, cache, need, free)
            d["tensor"].append(ms)
            d["tensor_scanned"].append(scanned)
            d["same_walk"].append(_ms(same_walk_tensor_plan, cache, state, need, free)[1])
        with count_tensor_work() as work, SyncCounter(device) as plan_syncs:
            plan = plan_owner_lane_eviction(cache, need_of(metas, N), free, state.index, N)
        finish_plan(plan)
        tensor_ops, syncs = tensor_ops + work.total, syncs + plan_syncs.count
        if i >= loads:
            with SyncCounter(device) as whole:
                cache.load_back(hit)
            whole_syncs += whole.count
            tree.hc.settle(cache)
            continue
        before = device_lanes(cache)
        can = coverable(before, path_of(ancestor), locked, deficit)
        evicted_before = list(counters_of(cache).pages_evicted_per_lane)
        with tally.clock(sync):
            loaded = cache.load_back(hit)
        tree.hc.settle(cache)  # the load ack taken by settle() releases load_back's lock
        tally.record(loaded is not None and len(loaded) > 0, can, deficit, before, device_lanes(cache))
        freed = [a - b for a, b in zip(counters_of(cache).pages_evicted_per_lane, evicted_before)]
        if any(deficit):
            d["amp"].append(sum(freed) / sum(need))
            d["damp"].append(sum(freed) / sum(deficit))
            d["redundant"].append(redundant_leaves(plan, N))
            violations += bound_violated(plan, N)
    return tally, d, dict(tensor_ops=tensor_ops, syncs=syncs, whole_syncs=whole_syncs, violations=violations)


def _upstream_side(tree: Tree, loads: int, device: str):
    from sglang_overlay.patches.cp_hicache_owner_lanes.planner import need_of

    cache, tally, sync = tree.cache, Tally(), _sync(device)
    evict_ms, amp, whole_syncs = [], [], 0
    for i, target in enumerate(tree.targets):
        hit, metas, ancestor = tree.chain(target)
        need = need_of(metas, N)
        deficit = [max(0, a - b) for a, b in zip(need, cache.token_to_kv_pool_allocator.class_free_page_counts())]
        if i >= loads:
            with SyncCounter(device) as whole:
                upstream_fallback_load_back(cache, hit)
            whole_syncs += whole.count
            tree.hc.settle(cache)
            continue
        before = device_lanes(cache)
        can = coverable(before, path_of(ancestor), locked, deficit)
        with tally.clock(sync):
            loaded, ms, evicted_pages = upstream_fallback_load_back(cache, hit)
        tree.hc.settle(cache)
        tally.record(loaded, can, deficit, before, device_lanes(cache))
        if ms:
            evict_ms.append(ms)
        if any(deficit):
            amp.append(evicted_pages / sum(need))
    return tally, evict_ms, amp, whole_syncs


def _median(values):
    return statistics.median(values) if values else None


def bench_size(release, num_leaves: int, loads: int, seed: int, device: str = "cpu") -> dict:
    t0 = time.perf_counter()
    tree = Tree(num_leaves, loads + COUNTED, seed, device)
    build_s, leaves = time.perf_counter() - t0, tree.num_leaves
    p, d, counts = _patch_side(tree, loads, device)
    del tree
    gc.collect()
    t0 = time.perf_counter()
    tree = Tree(num_leaves, loads + COUNTED, seed, device)
    build_s += time.perf_counter() - t0
    assert tree.num_leaves == leaves
    u, evict_ms, u_amp, u_syncs = _upstream_side(tree, loads, device)
    del tree
    gc.collect()
    pf, uf = p.figures(), u.figures()
    figures = {
        **schema.sides(schema.LOAD_BACK, pf, uf),
        "leaves": leaves,
        "loads": loads,
        "build_s": round(build_s, 2),
        "planning_ms_patch": _median(d["plan"]),
        "tensor_ops_planning": counts["tensor_ops"],
        "host_syncs_planning": counts["syncs"],
        "host_syncs_per_load_patch": counts["whole_syncs"] / COUNTED,
        "host_syncs_per_load_upstream": u_syncs / COUNTED,
    }
    detail = dict(
        time_per_call_ms_p99_patch=pf["time_ms_p99"],
        time_per_call_ms_p99_upstream=uf["time_ms_p99"],
        plan_ms_p99=pct(d["plan"], 99),
        tensor_plan_ms_median=_median(d["tensor"]),
        tensor_plan_ms_p99=pct(d["tensor"], 99),
        same_walk_tensor_ms_median=_median(d["same_walk"]),
        upstream_evict_ms_median=_median(evict_ms),
        upstream_evict_ms_p99=pct(evict_ms, 99),
        leaves_scanned_median=_median(d["scanned"]),
        leaves_scanned_max=max(d["scanned"], default=0),
        tensor_plan_leaves_scanned_median=_median(d["tensor_scanned"]),
        amplification_max=max(d["amp"], default=0.0),
        amplification_median=_median(d["amp"]) or 0.0,
        deficit_amplification_max=max(d["damp"], default=0.0),
        upstream_amplification_median=_median(u_amp) or 0.0,
        redundant_leaves_max=max(d["redundant"], default=0),
        plan_bound_violations=counts["violations"],
    )
    return schema.size_row(schema.LOAD_BACK, figures, NOT_MEASURED, detail)


def release_detail(quick: bool, seed: int, device: str) -> dict:
    conv, turns = (16, 5) if quick else (32, 10)
    return {
        "upstream_as_shipped_success_rate": 0.0,  # alloc() raises NotImplementedError on this allocator
        "replay_conversations": conv,
        "replay_turns": turns,
        "replay": {
            "patch": replay(True, conv, turns, seed, device),
            "upstream_fallback": replay(False, conv, turns, seed, device),
        },
    }


def report_detail(console, result) -> None:
    from rich.table import Table

    def ms(x, f="{:.3f}"):
        return "n/a" if x is None else f.format(x)

    table = Table(title="planning alone, beside the whole path (hiradix)")
    for col in ("leaves", "plan med/p99 ms", "(b) fork tensor ms", "(b') same-walk tensor ms",
                "(c) upstream evict ms", "scanned med/max", "amp max", "extra leaves", "bound violations"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in result["sizes"].values():
        x = r["release_detail"]
        table.add_row(
            f"{r['leaves']:,}",
            f"{ms(r['planning_ms_patch'])}/{ms(x['plan_ms_p99'])}",
            ms(x["tensor_plan_ms_median"], "{:.2f}"),
            ms(x["same_walk_tensor_ms_median"]),
            ms(x["upstream_evict_ms_median"], "{:.2f}"),
            f"{x['leaves_scanned_median']:.0f}/{x['leaves_scanned_max']}",
            f"{x['amplification_max']:.2f}",
            str(x["redundant_leaves_max"]),
            str(x["plan_bound_violations"]),
        )
    console.print(table)
    top = result["release_detail"]
    rt = Table(
        title=f"shared-KV pressure replay ({top['replay_conversations']} conversations x {top['replay_turns']} turns)"
    )
    for col in ("path", "load-backs", "success", "tokens re-prefilled", "planning p99 ms"):
        rt.add_column(col, justify="right")
    for name, r in top["replay"].items():
        rt.add_row(name, str(r["load_back_attempts"]), f"{r['load_back_success_rate']:.0%}",
                   str(r["tokens_reprefilled_after_refusal"]), ms(r["planning_p99_ms"]))  # fmt: skip
    console.print(rt)
