#!/usr/bin/env python
"""Benchmark: cp-hicache-owner-lanes's prefill/decode capacity eviction, whole path, on the installed pin.

What it measures. One call of upstream's capacity eviction (what runs before every paged extend and decode
allocation) hooked by the release's capacity target against the same call unhooked, on identical trees (one
per side from the same seed) with drained owner lanes at 1k / 10k / 100k evictable leaves:

- admission rate (``available_size() >= num_tokens`` after the call), patch and upstream (the patch keeps
  upstream's gate, so the same rate);
- pages evicted per deficit page on short lanes, pages in units holding no short-lane page (goal 0) and every
  page of a non-short lane evicted (co-residents included), nodes evicted;
- time per call from call to return (median), the ratio upstream / patch, and thread-CPU time;
- tensor ops and host syncs during the patch's planning (untimed, on the state just before each timed call;
  goal 0), and how often the patch planned the call itself or handed it to upstream.

Per release (the registry's release folder for the installed sglang picks the adapter, ``scripts/owner_lanes/``):

- ``unified`` (sglang >=0.5.23): ``BaseTokenToKVPoolAllocator.evict_to_free_tokens`` (owner-lane plan, evict
  the plan) against upstream's min-lane floor filled by ``evict_for_alloc`` + ``_evict_until_allocatable``, on
  the load-back benchmark's trees without load targets; each call asks 1-3 pages per lane, and running
  requests take back what it freed (outside the timing), so every call meets the same shortage;
- a release folder whose adapter declares no ``CAPACITY_TARGET`` hooks no capacity eviction: nothing to
  measure, the script says so and exits 3.

One JSON schema on every pin (``owner_lanes/schema.py``: ``CAPACITY``), files only where ``--json`` says::

    .venv/bin/python scripts/bench_capacity.py --quick --json out/cap.json

``--quick``: 1k and 10k leaves, 8 calls per tree; default: 1k, 10k and 100k, 16 calls; ``--sizes``/``--calls``
override. Exit status 3: the installed release hooks no capacity eviction (nothing measured, nothing written).
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
from owner_lanes import PATCH_ID, adapter_for, installed_release, report, schema  # noqa: E402
from owner_lanes.cli import check_device, parse_args, top_level  # noqa: E402

NOTHING_TO_MEASURE = 3


def capacity_target(version, release, adapter):
    """The release's capacity target the adapter measures.

    Raises:
        SystemExit: (status 3) the release declares no such target, naming what it does hook.
    """
    name = getattr(adapter, "CAPACITY_TARGET", None)
    hooked = [t.qualname for t in release.targets]
    if name is None or name not in hooked:
        print(
            f"bench_capacity: nothing to measure on sglang {version}: release folder {release.folder!r} of "
            f"{PATCH_ID} (sglang{release.upstream}) hooks no capacity eviction (it hooks {', '.join(hooked)}); "
            "prefill/decode eviction there is upstream's own",
            file=sys.stderr,
        )
        raise SystemExit(NOTHING_TO_MEASURE)
    return name


def main(argv=None):
    args = parse_args(__doc__, argv, quick="1k and 10k leaves, 8 calls per tree", per_tree="--calls", png=None)
    version, release = installed_release()
    adapter = adapter_for(release)
    target = capacity_target(version, release, adapter)
    check_device(args.device)
    logging.getLogger("sglang_overlay.patches.cp_hicache_owner_lanes").setLevel(logging.ERROR)
    adapter.prepare(args.device)
    rows = {str(n): adapter.capacity_size(release, n, args.per_tree, args.seed, args.device) for n in args.sizes}
    result = schema.result(
        schema.CAPACITY,
        **top_level(version, release, adapter, args),
        timed_call=target,
        upstream_path=adapter.CAPACITY_UPSTREAM_PATH,
        workload=adapter.CAPACITY_WORKLOAD,
        calls_per_tree=args.per_tree,
        sizes=rows,
        release_detail=adapter.capacity_detail(),
    )
    console = report.print_table(result, report.CAPACITY_COLUMNS)
    console.print("whole path, patch vs upstream (upstream ms / patch ms): " + report.speedups(result))
    write_outputs(args, result, console.print)
    return result


if __name__ == "__main__":
    main()
