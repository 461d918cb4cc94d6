#!/usr/bin/env python
"""Benchmark: cp-hicache-owner-lanes on sglang 0.5.23, whole load-back path against whole path.

What it measures. One call of ``UnifiedRadixCache._load_back_transfers`` hooked by the
patch (``unified.gate.load_back_transfers_hook``: owner-lane plan, evict the plan, upstream's
own ``alloc_cyclic`` load) against the same call unhooked (upstream's gate:
``available_size()``, i.e. the tightest lane, filled by lane-blind LRU ``evict_for_alloc``,
then the same load), at 1k / 10k / 100k evictable leaves:

- success rate on coverable load-backs (coverable: every per-lane deficit is at most the
  pages of that lane in unlocked device nodes off the load's path), patch and upstream;
- pages evicted per page needed on short lanes (a lane is short for a load when its
  need exceeds its free pages; pages of short lanes evicted / deficit pages), and
  pages evicted on lanes that are not short, in two forms: pages of eviction units
  (an evicted node with its evicted descendants) that hold no page of a short lane
  (``pages_evicted_nonshort``: evicted for no short lane; goal 0) and every page of a
  non-short lane evicted, co-residents of short-lane units included
  (``pages_evicted_nonshort_lanes``: a unit goes whole, so the patch's is not 0);
- time per call, from call to return (median over the load-backs of a tree), and the
  ratio upstream / patch; beside it the calling thread's CPU time per call
  (``time.thread_time``), less sensitive to other jobs on shared cores;
- tensor ops during planning (``unified.planning.plan_load_back`` under the TorchFunctionMode +
  TorchDispatchMode counter of ``tests/support/hicache_tensor_count.py``, on the same
  tree state just before each timed patch call; goal 0).

How. Each side gets its own tree, built the same way from the same seed on the CPU
harness of the 0.5.23 tests (``tests/support/hicache_cpu_0523.py``: real
UnifiedRadixCache, HybridCacheController, PageInterleavePoolAllocator, host pool and
transfer engine; write-through; N = 8 owner lanes, page 4): first the load targets
(3-10 page chains at random rotation bases, demoted to host), then the evictable leaves
(1-2 page chains at random bases, 30% of them one-page children of an earlier chain, in
insertion = LRU order), about 3% of the leaves locked by running requests, then running
requests hold pages until lanes 2 and 5 have no free page and the other lanes a few
(enough for every load, so they never become short). Then the same sequence of
load-backs runs on both trees (``cache.load_back``, whose ``_load_back_transfers`` is
the timed call; the H2D copy is settled after each call and the loaded prefix matched
once, as the request that loaded it would, both outside the timing). Evicted pages are read from the device nodes before and
after each call (outside the timing); lanes per node come from the rotation phase
(closed form). The leaf index the patch keeps is built once per cache; its build is
timed separately (``index_build_ms_patch``) before the first load and is not in the
per-call times. Planning is counted, not timed, on an untimed call just before each
timed one (it evicts nothing; it may drop stale entries from the lazy leaf heap).

Command (files only where --json/--png say)::

    cd /work/main && HF_HUB_OFFLINE=1 .venv-0.5.23/bin/python scripts/bench_owner_lanes_0523.py --quick --json /tmp/b23.json

``--device cuda``: the device KV pool and the allocator's index tensors on the GPU (the host pool in host
memory; the H2D copy through the stand-in of ``tests/support/hicache_cpu_0523.py``); each timed call ends
with ``torch.cuda.synchronize()``, and planning runs under ``torch.cuda.set_sync_debug_mode("error")`` as well
as the counter (a host sync raises). ``scripts/gpu_check.sh`` runs it at 10k and 100k leaves.

``--quick``: 1k and 10k leaves, 6 load-backs per tree (about a minute on 2 shared cores);
default: 1k, 10k and 100k, 12 load-backs; ``--sizes`` overrides the sizes.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import add_output_flags, write_outputs  # noqa: E402

N = 8
PS = 4
SHORT_LANES = (2, 5)
LOCKED_FRACTION = 0.03
CHILD_FRACTION = 0.3
BATCH = 256  # inserts between two settles of the write-through backups


# --------------------------------------------------------------------------- trees


def class_counts(start, pages, n=N):
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    return PageInterleavePoolAllocator._class_counts(start % n, pages, n)


def workload(num_leaves: int, num_loads: int, seed: int):
    """The deterministic specs both trees are built from: specs are drawn until the tree
    has ``num_leaves`` evictable leaves (leaves not locked by a running request)."""
    rng = random.Random(seed)
    targets = [(rng.randrange(N), rng.randint(3, 10)) for _ in range(num_loads)]
    leaves = []  # (parent index or None, base, pages)
    is_leaf = []
    want = int(num_leaves / (1 - LOCKED_FRACTION)) + 1
    count = 0
    while count < want:
        i = len(leaves)
        if i and rng.random() < CHILD_FRACTION:
            p = rng.randrange(i)
            while leaves[p][0] is not None:  # children hang under root chains only
                p = rng.randrange(i)
            leaves.append((p, leaves[p][1], 1))
            if is_leaf[p]:
                is_leaf[p] = False
                count -= 1
        else:
            leaves.append((None, rng.randrange(N), rng.randint(1, 2)))
        is_leaf.append(True)
        count += 1
    leaf_ids = [i for i, x in enumerate(is_leaf) if x]
    locked = sorted(rng.sample(leaf_ids, len(leaf_ids) - num_leaves))
    return targets, leaves, locked


def build_tree(num_leaves: int, num_loads: int, seed: int, device: str = "cpu"):
    """A Harness whose tree holds the workload; returns (harness, [(load node id, its keys)])."""
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    from tests.support.hicache_cpu_0523 import Harness

    targets, leaves, locked = workload(num_leaves, num_loads, seed)
    use = [0] * N
    for parent, base, pages in leaves:
        start = base if parent is None else base + leaves[parent][2]
        use = [u + c for u, c in zip(use, class_counts(start, pages))]
    headroom = 2 * num_loads + 4  # free pages left on lanes that are not short
    per_rank = max(use) + headroom + 4
    h = Harness(n=N, ps=PS, pages_per_rank=per_rank, layers=1, device=device)
    loads = []
    for base, pages in targets:
        keys, _ = h.chain(base, pages)
        loads.append((h.to_host(keys), keys))
    made = []  # (keys, device indices) per leaf spec
    for i, (parent, base, pages) in enumerate(leaves):
        prefix, prefix_idx = ([], None) if parent is None else made[parent]
        start = (base + len(prefix) // PS) % N
        idx = h.alloc.alloc_cyclic(start_class=start, need_size=pages * PS)
        assert idx is not None, "pool sized from the workload's lane use"
        keys = prefix + h.fresh_keys(pages)
        value = idx if parent is None else torch.cat([prefix_idx, idx])
        h.cache.insert(InsertParams(key=RadixKey(keys), value=value, rotation_base=base, prev_prefix_len=len(prefix)))
        made.append((keys, idx if parent is None else None))
        if i % BATCH == BATCH - 1:
            h.settle()
    h.settle()
    for i in locked:  # running requests on these prefixes
        h.cache.inc_lock_ref(h.match(made[i][0]).last_device_node)
    free = h.alloc.class_free_page_counts()
    for lane in range(N):
        h.hold(lane, free[lane] - (0 if lane in SHORT_LANES else headroom))
    return h, loads


# --------------------------------------------------------------------------- reading the tree (untimed)


def device_lanes(h):
    """{node: pages per lane} of every device-resident node (closed form from the rotation
    phase, no tensor), and {node: lock} for the coverability oracle."""
    root = h.tree.root_node
    out = {}
    stack = [(child, 0) for child in root.children.values()]
    while stack:
        node, prefix = stack.pop()
        pages = len(node.key) // PS
        stack.extend((c, prefix + pages) for c in node.children.values())
        if not node.evicted:
            out[node] = class_counts(node.rotation_base + prefix, pages)
    return out


def locked(node) -> bool:
    return max(cd.lock_ref for cd in node.component_data) > 0


def load_need(h, node_id):
    """(pages per lane the load draws, tokens): the top evicted node's phase, closed form."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import evicted_segment

    seg = evicted_segment(h.tree, node_id)
    tokens = sum(len(x.key) for x in seg)
    return list(class_counts(h.tree.rotation_phase_of(seg[0].id), tokens // PS)), tokens


def coverable(h, node_id, lanes, deficit) -> bool:
    path = set(h.path_nodes(node_id))
    supply = [0] * N
    for node, counts in lanes.items():
        if node not in path and not locked(node):
            supply = [s + c for s, c in zip(supply, counts)]
    return all(d <= s for d, s in zip(deficit, supply))


def eviction_split(before, after, deficit):
    """Pages evicted: of short lanes, of non-short lanes (all), in units holding no short lane."""
    gone = [x for x in before if x not in after]
    gone_set = set(gone)
    short = [d > 0 for d in deficit]
    units = {}
    for x in gone:
        root = x
        while root.parent in gone_set:
            root = root.parent
        units.setdefault(root, []).append(x)
    short_pages = nonshort_lane_pages = nonshort_unit_pages = 0
    for members in units.values():
        counts = [sum(before[x][c] for x in members) for c in range(N)]
        s = sum(c for c, is_short in zip(counts, short) if is_short)
        short_pages += s
        nonshort_lane_pages += sum(counts) - s
        if s == 0:
            nonshort_unit_pages += sum(counts)
    return short_pages, nonshort_lane_pages, nonshort_unit_pages, len(gone)


# --------------------------------------------------------------------------- one side


def planning_counted(plan, cuda: bool):
    """``plan()`` under the tensor-op counter; on CUDA also under ``set_sync_debug_mode("error")``, which
    raises on any host sync (a real one, not only the ops the counter calls syncs)."""
    import torch

    from tests.support.hicache_tensor_count import count_tensor_work

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
    try:
        with count_tensor_work() as work:
            plan()
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
    return work


def run_side(patch: bool, num_leaves: int, num_loads: int, seed: int, device: str = "cpu") -> dict:
    import torch
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.gate import load_back_transfers_hook
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import plan_load_back
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of

    t0 = time.perf_counter()
    h, loads = build_tree(num_leaves, num_loads, seed, device)
    build_s = time.perf_counter() - t0
    cache = h.cache
    original = UnifiedRadixCache.__dict__["_load_back_transfers"]
    original = getattr(original, "__wrapped__", original)
    call = functools.partial(load_back_transfers_hook, original, cache) if patch else functools.partial(original, cache)
    times, cpu_times = [], []

    def timed(**kwargs):
        c, t = time.thread_time(), time.perf_counter()
        try:
            out = call(**kwargs)  # noqa: F821 (deleted only after the last call, below)
            if device == "cuda":  # the call's device work counts (the eviction's frees, the load's allocation)
                torch.cuda.synchronize()
            return out
        finally:
            times.append((time.perf_counter() - t) * 1e3)
            cpu_times.append((time.thread_time() - c) * 1e3)

    cache._load_back_transfers = timed  # instance attribute: this cache only
    row = {"leaves": len(h.tree.evictable_device_leaves), "build_s": round(build_s, 2)}
    if patch:
        state = state_of(cache)
        t = time.perf_counter()
        state.leaf_index(h.tree)
        row["index_build_ms"] = (time.perf_counter() - t) * 1e3
    ok = cov = ok_cov = 0
    short_pages = deficit_pages = nonshort_lanes = nonshort_units = nodes_evicted = 0
    tensor_ops = syncs = 0
    no_deficit_loads = no_deficit_evicted = 0
    for node_id, keys in loads:
        before = device_lanes(h)
        need, tokens = load_need(h, node_id)
        free = h.alloc.class_free_page_counts()
        deficit = [max(0, a - b) for a, b in zip(need, free)]
        can = coverable(h, node_id, before, deficit)
        if patch:
            work = planning_counted(
                functools.partial(plan_load_back, cache, state, node_id, free=free), device == "cuda"
            )
            tensor_ops += work.total
            syncs += work.host_syncs
        loaded = cache.load_back(node_id)
        if loaded:
            h.settle()
            h.match(keys)  # the request that loaded it runs and ends: the chain is now the MRU one
        after = device_lanes(h)
        s, nl, nu, g = eviction_split(before, after, deficit)
        ok += loaded
        cov += can
        ok_cov += loaded and can
        short_pages += s
        deficit_pages += sum(deficit)
        nonshort_lanes += nl
        nonshort_units += nu
        nodes_evicted += g
        if not any(deficit):
            no_deficit_loads += 1
            no_deficit_evicted += s + nl
    assert len(times) == len(loads), (len(times), len(loads))
    row.update(
        loads=len(loads),
        loaded=ok,
        coverable=cov,
        success_rate=ok_cov / cov if cov else 1.0,
        deficit_pages=deficit_pages,
        short_pages_evicted=short_pages,
        pages_evicted_per_page_needed_short=short_pages / deficit_pages if deficit_pages else 0.0,
        pages_evicted_nonshort=nonshort_units,
        pages_evicted_nonshort_lanes=nonshort_lanes,
        nodes_evicted=nodes_evicted,
        evicted_tokens_reported=h.evicted_tokens,
        loads_without_deficit=no_deficit_loads,
        pages_evicted_on_loads_without_deficit=no_deficit_evicted,
        time_ms_median=statistics.median(times),
        time_ms_mean=statistics.fmean(times),
        time_ms_max=max(times),
        cpu_ms_median=statistics.median(cpu_times),
    )
    if patch:
        row.update(tensor_ops_planning=tensor_ops, host_syncs_planning=syncs)
    # one tree alive at a time: release this one's locks, pages and nodes before the next build
    cache.__dict__.pop("_load_back_transfers", None)
    del h, cache, call, timed
    gc.collect()
    return row


def bench_size(num_leaves: int, num_loads: int, seed: int, device: str = "cpu") -> dict:
    p = run_side(True, num_leaves, num_loads, seed, device)
    u = run_side(False, num_leaves, num_loads, seed, device)
    assert p["leaves"] == u["leaves"]
    return {
        "leaves": p["leaves"],
        "loads": p["loads"],
        "success_rate_patch": p["success_rate"],
        "success_rate_upstream": u["success_rate"],
        "coverable_loads": p["coverable"],
        "coverable_loads_upstream": u["coverable"],
        "deficit_pages_patch": p["deficit_pages"],
        "deficit_pages_upstream": u["deficit_pages"],
        "pages_evicted_per_page_needed_short_patch": p["pages_evicted_per_page_needed_short"],
        "pages_evicted_per_page_needed_short_upstream": u["pages_evicted_per_page_needed_short"],
        "pages_evicted_nonshort_patch": p["pages_evicted_nonshort"],
        "pages_evicted_nonshort_upstream": u["pages_evicted_nonshort"],
        "pages_evicted_nonshort_lanes_patch": p["pages_evicted_nonshort_lanes"],
        "pages_evicted_nonshort_lanes_upstream": u["pages_evicted_nonshort_lanes"],
        "loads_without_deficit": p["loads_without_deficit"],
        "pages_evicted_on_loads_without_deficit_patch": p["pages_evicted_on_loads_without_deficit"],
        "pages_evicted_on_loads_without_deficit_upstream": u["pages_evicted_on_loads_without_deficit"],
        "time_ms_patch": p["time_ms_median"],
        "time_ms_upstream": u["time_ms_median"],
        "time_ms_mean_patch": p["time_ms_mean"],
        "time_ms_mean_upstream": u["time_ms_mean"],
        "speedup_end_to_end": u["time_ms_median"] / p["time_ms_median"],
        "cpu_ms_patch": p["cpu_ms_median"],
        "cpu_ms_upstream": u["cpu_ms_median"],
        "speedup_end_to_end_cpu": u["cpu_ms_median"] / p["cpu_ms_median"],
        "index_build_ms_patch": p["index_build_ms"],
        "tensor_ops_planning": p["tensor_ops_planning"],
        "host_syncs_planning": p["host_syncs_planning"],
        "build_s": p["build_s"] + u["build_s"],
        "patch": p,
        "upstream": u,
    }


# --------------------------------------------------------------------------- output


def print_table(rows, loads):
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"owner-lane load-back on 0.5.23, whole path (N={N}, page {PS}, short lanes "
        f"{list(SHORT_LANES)}, {loads} load-backs per tree; patch | upstream)"
    )
    for col in [
        "leaves",
        "success on coverable",
        "short: evicted/needed",
        "non-short pages evicted",
        "pages of non-short lanes (all)",
        "ms median",
        "speedup",
        "thread-CPU ms median",
        "index build ms",
        "tensor ops planning",
    ]:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['leaves']:,}",
            f"{r['success_rate_patch']:.0%} | {r['success_rate_upstream']:.0%}",
            f"{r['pages_evicted_per_page_needed_short_patch']:.2f} | "
            f"{r['pages_evicted_per_page_needed_short_upstream']:.2f}",
            f"{r['pages_evicted_nonshort_patch']} | {r['pages_evicted_nonshort_upstream']}",
            f"{r['pages_evicted_nonshort_lanes_patch']} | {r['pages_evicted_nonshort_lanes_upstream']}",
            f"{r['time_ms_patch']:.3f} | {r['time_ms_upstream']:.3f}",
            f"{r['speedup_end_to_end']:.1f}x",
            f"{r['cpu_ms_patch']:.3f} | {r['cpu_ms_upstream']:.3f}",
            f"{r['index_build_ms_patch']:.1f}",
            str(r["tensor_ops_planning"]),
        )
    console = Console(width=max(170, Console().width))
    console.print(table)
    return console


def write_png(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["leaves"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    a.plot(xs, [r["time_ms_patch"] for r in rows], marker="o", label="patch (owner-lane plan)")
    a.plot(xs, [r["time_ms_upstream"] for r in rows], marker="o", label="upstream (min-lane gate + LRU)")
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("evictable leaves")
    a.set_ylabel("median ms per _load_back_transfers")
    a.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=7)
    w = 0.35
    pos = list(range(len(rows)))
    for side, shift, color in (("patch", -w / 2, "tab:blue"), ("upstream", w / 2, "tab:orange")):
        short = [r[side]["short_pages_evicted"] for r in rows]
        other = [r[f"pages_evicted_nonshort_{side}"] for r in rows]
        xs_side = [i + shift for i in pos]
        b.bar(xs_side, short, w, color=color, label=f"{side}: pages of short lanes")
        b.bar(
            xs_side,
            other,
            w,
            bottom=short,
            color=color,
            alpha=0.35,
            hatch="//",
            label=f"{side}: pages of units holding no short lane",
        )
    b.set_xticks(pos, [f"{x:,}" for x in xs])
    b.set_xlabel("evictable leaves")
    b.set_ylabel(f"pages evicted over {rows[0]['loads']} load-backs")
    top = max(
        r[s]["short_pages_evicted"] + r[f"pages_evicted_nonshort_{s}"] for r in rows for s in ("patch", "upstream")
    )
    b.set_ylim(0, max(1, top) * 1.7)  # room for the legend
    b.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"cp-hicache-owner-lanes, sglang 0.5.23, N={N}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def check_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(
            f"--device cuda needs a visible CUDA device (torch {torch.__version__}, CUDA build: "
            f"{torch.version.cuda or 'none'}); use --device cpu"
        )


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_flags(ap, quick="1k and 10k leaves, 6 load-backs per tree (about a minute)", png="the chart")
    ap.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        metavar="N,N,...",
        help="evictable leaves per tree (default 1000,10000,100000; --quick 1000,10000)",
    )
    ap.add_argument("--loads", type=int, help="load-backs per tree (default 12; --quick 6)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the KV pool and indices live")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import logging

    logging.getLogger("sglang_overlay.patches.cp_hicache_owner_lanes").setLevel(logging.ERROR)
    sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])
    loads = args.loads or (6 if args.quick else 12)
    if args.device == "cuda":
        check_cuda()
    rows = [bench_size(size, loads, args.seed, args.device) for size in sizes]
    console = print_table(rows, loads)
    big = rows[-1]
    console.print(f"whole path, upstream / patch: {big['speedup_end_to_end']:.1f}x at {big['leaves']:,} leaves")
    result = {
        "quick": args.quick,
        "shard_size": N,
        "page_size": PS,
        "short_lanes": list(SHORT_LANES),
        "loads_per_tree": loads,
        "seed": args.seed,
        "device": args.device,
        "sizes": {str(r["leaves"]): r for r in rows},
    }
    write_outputs(args, result, console.print, lambda path: write_png(rows, path))
    return result


if __name__ == "__main__":
    main()
