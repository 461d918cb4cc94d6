#!/usr/bin/env python
"""Benchmark: cp-hicache-owner-lanes on sglang 0.5.23, prefill/decode capacity eviction, whole path.

What it measures. One call of ``allocator.evict_to_free_tokens(tree_cache, num_tokens)``
(what upstream runs before every paged extend and decode allocation) hooked by the patch
(``unified.capacity.evict_to_free_tokens_hook``: owner-lane plan, evict the plan) against
the same call unhooked (upstream: ``evict_for_alloc`` for the shortfall of the min-lane
floor, then ``_evict_until_allocatable`` until that floor rises), at 1k / 10k / 100k
evictable leaves:

- admission rate (``available_size() >= num_tokens`` after the call), patch and upstream
  (the patch claims the same gate outcome, so the same rate);
- pages evicted per deficit page on short lanes, and pages evicted in units holding no
  page of a short lane (goal 0) / of lanes that are not short (co-residents included);
- time per call, call to return (median), the ratio upstream / patch, and thread-CPU time;
- tensor ops and host syncs during planning (``unified.planning.plan_lanes`` under the counter of
  ``tests/support/hicache_tensor_count.py``, untimed, on the state just before each
  timed patch call; goal 0).

How. The trees are the load-back benchmark's (``bench_owner_lanes_0523.build_tree``: real
UnifiedRadixCache + HiCache controller + PageInterleavePoolAllocator on the CPU, N = 8,
page 4, 3% of leaves locked, lanes 2 and 5 drained by running requests, the other lanes
a few pages of headroom), one per side from the same seed, without load targets. Each
call asks for ``k`` pages per lane (``num_tokens = k * N * page``, ``k`` drawn 1-3 from
the seed, the same sequence on both sides); after it, running requests take every free
page of lanes 2 and 5 again and what the eviction freed above the headroom elsewhere
(outside the timing), so every call meets the same shortage.

Command (files only where --json/--png say)::

    cd /work/main && .venv-0.5.23/bin/python scripts/bench_capacity_0523.py --quick --json /tmp/cap23.json

``--quick``: 1k and 10k leaves, 8 calls per tree; default: 1k, 10k and 100k, 16 calls.
"""

from __future__ import annotations

import argparse
import functools
import gc
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_owner_lanes_0523 as trees  # noqa: E402  (sets HF_HUB_OFFLINE; N, PS, SHORT_LANES)
from bench_common import add_output_flags, require_sglang, write_outputs  # noqa: E402

N, PS, SHORT_LANES = trees.N, trees.PS, trees.SHORT_LANES
HEADROOM = 4  # build_tree's headroom with no load targets: 2 * 0 + 4


def refill_shortage(h) -> None:
    """Running requests take what the call freed: lanes 2 and 5 empty again, the rest back to the headroom."""
    free = h.alloc.class_free_page_counts()
    for lane in range(N):
        h.hold(lane, free[lane] - (0 if lane in SHORT_LANES else min(free[lane], HEADROOM)))


def run_side(patch: bool, num_leaves: int, calls: int, seed: int) -> dict:
    from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator

    from sglang_overlay.patches.cp_hicache_owner_lanes.unified import capacity as cap
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import plan_lanes
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of
    from tests.support.hicache_tensor_count import count_tensor_work

    t0 = time.perf_counter()
    h, _ = trees.build_tree(num_leaves, 0, seed)
    build_s = time.perf_counter() - t0
    original = BaseTokenToKVPoolAllocator.__dict__["evict_to_free_tokens"]
    original = getattr(original, "__wrapped__", original)
    call = (
        functools.partial(cap.evict_to_free_tokens_hook, original, h.alloc)
        if patch
        else functools.partial(original, h.alloc)
    )
    row = {"leaves": len(h.tree.evictable_device_leaves), "build_s": round(build_s, 2)}
    state = state_of(h.cache)
    if patch:
        t = time.perf_counter()
        state.leaf_index(h.tree)
        row["index_build_ms"] = (time.perf_counter() - t) * 1e3
    rng = random.Random(seed)
    times, cpu_times = [], []
    admitted = short_pages = deficit_pages = nonshort_lanes = nonshort_units = nodes = 0
    tensor_ops = syncs = 0
    for _ in range(calls):
        k = rng.randint(1, 3)
        num_tokens = k * N * PS
        before = trees.device_lanes(h)
        free = h.alloc.class_free_page_counts()
        deficit = [max(0, k - f) for f in free]
        if patch:
            with count_tensor_work() as work:
                plan_lanes(h.cache, state, [k] * N, free)
            tensor_ops += work.total
            syncs += work.host_syncs
        c, t = time.thread_time(), time.perf_counter()
        call(h.cache, num_tokens)
        times.append((time.perf_counter() - t) * 1e3)
        cpu_times.append((time.thread_time() - c) * 1e3)
        admitted += h.alloc.available_size() >= num_tokens
        s, nl, nu, g = trees.eviction_split(before, trees.device_lanes(h), deficit)
        short_pages += s
        deficit_pages += sum(deficit)
        nonshort_lanes += nl
        nonshort_units += nu
        nodes += g
        refill_shortage(h)
    row.update(
        calls=calls,
        admitted=admitted,
        admission_rate=admitted / calls,
        deficit_pages=deficit_pages,
        short_pages_evicted=short_pages,
        pages_evicted_per_page_needed_short=short_pages / deficit_pages if deficit_pages else 0.0,
        pages_evicted_nonshort=nonshort_units,
        pages_evicted_nonshort_lanes=nonshort_lanes,
        nodes_evicted=nodes,
        time_ms_median=statistics.median(times),
        cpu_ms_median=statistics.median(cpu_times),
    )
    if patch:
        row.update(
            tensor_ops_planning=tensor_ops,
            host_syncs_planning=syncs,
            capacity_plans=state.counters.capacity_plans,
            capacity_fallbacks=state.counters.capacity_fallbacks,
        )
    del h, call
    gc.collect()
    return row


def bench_size(num_leaves: int, calls: int, seed: int) -> dict:
    p = run_side(True, num_leaves, calls, seed)
    u = run_side(False, num_leaves, calls, seed)
    assert p["leaves"] == u["leaves"]
    out = {"leaves": p["leaves"], "calls": calls}
    for key in (
        "admission_rate",
        "deficit_pages",
        "pages_evicted_per_page_needed_short",
        "pages_evicted_nonshort",
        "pages_evicted_nonshort_lanes",
        "nodes_evicted",
        "time_ms_median",
        "cpu_ms_median",
    ):
        out[f"{key}_patch"], out[f"{key}_upstream"] = p[key], u[key]
    out.update(
        speedup_end_to_end=u["time_ms_median"] / p["time_ms_median"],
        speedup_end_to_end_cpu=u["cpu_ms_median"] / p["cpu_ms_median"],
        tensor_ops_planning=p["tensor_ops_planning"],
        host_syncs_planning=p["host_syncs_planning"],
        index_build_ms_patch=p["index_build_ms"],
        patch=p,
        upstream=u,
    )
    return out


def print_table(rows, calls):
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"owner-lane capacity eviction on 0.5.23, whole path (N={N}, page {PS}, short lanes "
        f"{list(SHORT_LANES)}, {calls} calls per tree; patch | upstream)"
    )
    for col in [
        "leaves",
        "admitted",
        "short: evicted/needed",
        "non-short units' pages",
        "pages of non-short lanes",
        "nodes evicted",
        "ms median",
        "speedup",
        "thread-CPU ms",
        "tensor ops planning",
    ]:
        table.add_column(col, justify="right")
    for r in rows:
        pair = lambda key, f="{}": f"{f.format(r[key + '_patch'])} | {f.format(r[key + '_upstream'])}"  # noqa: E731
        table.add_row(
            f"{r['leaves']:,}",
            pair("admission_rate", "{:.0%}"),
            pair("pages_evicted_per_page_needed_short", "{:.2f}"),
            pair("pages_evicted_nonshort"),
            pair("pages_evicted_nonshort_lanes"),
            pair("nodes_evicted"),
            pair("time_ms_median", "{:.3f}"),
            f"{r['speedup_end_to_end']:.1f}x",
            pair("cpu_ms_median", "{:.3f}"),
            str(r["tensor_ops_planning"]),
        )
    console = Console(width=max(170, Console().width))
    console.print(table)
    return console


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_flags(ap, quick="1k and 10k leaves, 8 calls per tree", png=None)
    ap.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        metavar="N,N,...",
        help="evictable leaves per tree (default 1000,10000,100000; --quick 1000,10000)",
    )
    ap.add_argument("--calls", type=int, help="capacity calls per tree (default 16; --quick 8)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    require_sglang(">=0.5.23", "bench_capacity_0523.py", "On 0.5.20 no allocator is page-interleaved.")
    import logging

    logging.getLogger("sglang_overlay.patches.cp_hicache_owner_lanes").setLevel(logging.ERROR)
    sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])
    calls = args.calls or (8 if args.quick else 16)
    rows = [bench_size(size, calls, args.seed) for size in sizes]
    console = print_table(rows, calls)
    big = rows[-1]
    console.print(f"whole path, upstream / patch: {big['speedup_end_to_end']:.1f}x at {big['leaves']:,} leaves")
    result = {
        "quick": args.quick,
        "shard_size": N,
        "page_size": PS,
        "short_lanes": list(SHORT_LANES),
        "calls_per_tree": calls,
        "seed": args.seed,
        "sizes": {str(r["leaves"]): r for r in rows},
    }
    write_outputs(args, result, console.print)
    return result


if __name__ == "__main__":
    main()
