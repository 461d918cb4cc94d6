#!/usr/bin/env python
"""Benchmark: cp-hicache-owner-lanes's HiCache load-back, whole path against whole path, on the installed pin.

What it measures. On identical trees, one per side from the same seed, with drained owner lanes at 1k / 10k /
100k evictable leaves, the same sequence of load-backs through the patch's path and through upstream's:

- success rate on coverable load-backs (coverable: every per-lane deficit is at most the pages of that lane in
  unlocked device nodes off the load's path), patch and upstream;
- pages evicted per deficit page on short lanes (a lane is short for a load when its need exceeds its free
  pages), pages in eviction units (an evicted node with its evicted descendants) holding no page of a short
  lane (``pages_evicted_nonshort``, goal 0), and every page of a non-short lane evicted
  (``pages_evicted_nonshort_lanes``: a unit goes whole, so the patch's is not 0);
- time per call from call to return (median over the loads of a tree) and the ratio upstream / patch; the
  calling thread's CPU time beside it (less sensitive to other jobs on shared cores);
- tensor ops and host syncs during the patch's planning (counted on the state just before each timed call;
  goal 0), and host syncs per whole load-back where the release's adapter counts them;
- the patch's planning alone (``planning_ms_patch``, median ms): the adapter times the planning call it makes
  on that state from outside (the patch keeps no duration).

Per release (the registry's release folder for the installed sglang picks the adapter, ``scripts/owner_lanes/``):

- ``unified`` (sglang >=0.5.23): ``UnifiedRadixCache._load_back_transfers`` hooked (owner-lane plan, evict the
  plan, upstream's ``alloc_cyclic`` load) against upstream's min-lane gate + LRU ``evict_for_alloc``
  (``owner_lanes/unified.py``).

A release folder added later brings an adapter of the same shape. Every adapter writes one JSON schema
(``owner_lanes/schema.py``: the same top-level and per-size keys on every pin; a figure a release cannot measure
is null, its reason in the row's ``not_measured``). The trees differ by release (each adapter's ``WORKLOAD``,
written in the JSON): compare the ratios and counts across pins.

    .venv/bin/python scripts/bench_owner_lanes.py --quick --json out/ol.json --png out/ol.png

``--quick``: 1k and 10k leaves, 8 load-backs per tree; default: 1k, 10k and 100k, 16 load-backs; ``--sizes`` and
``--loads`` override. ``--device cuda``: the device KV pool and the allocator's index tensors on the GPU, each
timed call ends with ``torch.cuda.synchronize()``; host syncs are real (``scripts/gpu_check.sh`` runs it at 10k
and 100k leaves). Files are written only where ``--json``/``--png`` say.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import write_outputs  # noqa: E402
from owner_lanes import adapter_for, installed_release, report, schema  # noqa: E402
from owner_lanes.cli import check_device, parse_args, top_level  # noqa: E402


def main(argv=None):
    args = parse_args(__doc__, argv, quick="1k and 10k leaves, 8 load-backs per tree", per_tree="--loads")
    version, release = installed_release()
    check_device(args.device)
    logging.getLogger("sglang_overlay.patches.cp_hicache_owner_lanes").setLevel(logging.ERROR)
    adapter = adapter_for(release)
    adapter.prepare(args.device)
    rows = {str(n): adapter.bench_size(release, n, args.per_tree, args.seed, args.device) for n in args.sizes}
    result = schema.result(
        schema.LOAD_BACK,
        **top_level(version, release, adapter, args),
        timed_call=adapter.TIMED_CALL,
        upstream_path=adapter.UPSTREAM_PATH,
        workload=adapter.WORKLOAD,
        loads_per_tree=args.per_tree,
        sizes=rows,
        release_detail=adapter.release_detail(args.quick, args.seed, args.device),
    )
    console = report.print_table(result, report.LOAD_BACK_COLUMNS)
    adapter.report_detail(console, result)
    console.print("whole path, patch vs upstream (upstream ms / patch ms): " + report.speedups(result))
    write_outputs(args, result, console.print, lambda path: report.write_png(result, path, adapter.CHART_CURVES))
    return result


if __name__ == "__main__":
    main()
