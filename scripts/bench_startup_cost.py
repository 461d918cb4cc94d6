#!/usr/bin/env python
"""What the overlay costs each process of a launch at start-up, as each process measured it itself.

Launches a real overlay server on the CPU (tiny offline model, tests/support/real_server; ``--tp-size 2``: one core
per rank, NCCL kept out) ``--launches`` times, and reads every process's own record through ``sglang-overlay
status`` (``observe.startup_cost``): per step, the count, wall and CPU milliseconds and the modules it made the process
import: ``import`` (the overlay's package and core, where the process had not imported them), ``apply`` (lock,
pin and fingerprint verification, hooks of targets already imported), ``hooks`` (hooks of targets as their
modules import), ``cluster_check`` (the ranks' check). Prints the median per process role and step, writes JSON.
Unlike a time-to-ready ratio, the figures are the overlay's own steps, so the machine's noise does not hide them
(CPU time is the figure to judge on a loaded machine). Goal (issue 29): under 100 ms per process, and nothing but
the cluster check growing with the number of processes.

    .venv/bin/python scripts/bench_startup_cost.py --tp-size 2 --launches 3 --json out/startup_cost.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.real_server.cluster import tensor_parallel  # noqa: E402
from tests.support.real_server.model import build_tiny_model  # noqa: E402
from tests.support.real_server.server import ServerConfig, running_server  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from bench_common import add_output_flags, write_json  # noqa: E402

STEPS = ("import", "apply", "hooks", "cluster_check")


def one_launch(tp_size: int, log_dir: Path, model: Path) -> list[dict]:
    """Each process of one launch: its role, rank and its own start-up figures."""
    from sglang_overlay.observe.server_status import server_status

    config = ServerConfig(overlay=True)
    config = tensor_parallel(config, tp_size) if tp_size > 1 else config
    with running_server(config, log_dir, model, poll_s=0.5) as server:
        report = server_status(server.url)
    return [{"role": p["role"], "rank": p["rank"], "pid": p["pid"], "startup": p.get("startup") or {}}
            for p in report["processes"] if not p.get("remote") and p["overlay"]]  # fmt: skip


def summarise(launches: list[list[dict]]) -> list[dict]:
    """Median per (role, rank) and step over the launches, and the total per process."""
    by_process: dict[tuple, list[dict]] = {}
    for launch in launches:
        for p in launch:
            by_process.setdefault((p["role"], p["rank"]), []).append(p["startup"])
    rows = []
    for (role, rank), seen in sorted(by_process.items()):
        row = {"role": role, "rank": rank, "launches": len(seen)}
        for step in STEPS:
            for unit in ("wall_ms", "cpu_ms", "modules", "count"):
                values = [s.get(step, {}).get(unit, 0) for s in seen]
                row[f"{step}_{unit}"] = statistics.median(values)
        row["total_wall_ms"] = round(sum(row[f"{s}_wall_ms"] for s in STEPS), 2)
        row["total_cpu_ms"] = round(sum(row[f"{s}_cpu_ms"] for s in STEPS), 2)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp-size", type=int, default=2, help="ranks of the server, one core each")
    ap.add_argument("--launches", type=int, default=3, help="launches (the medians are over them)")
    add_output_flags(ap, "one launch", png=None)
    args = ap.parse_args(argv)
    args.launches = 1 if args.quick else args.launches
    model, log_dir = build_tiny_model(), Path(tempfile.mkdtemp(prefix="startup-cost-"))
    launches = [one_launch(args.tp_size, log_dir / f"launch-{i}", model) for i in range(args.launches)]
    rows = summarise(launches)
    head = ["role", "rank"] + [f"{s} ms wall/cpu (modules)" for s in STEPS] + ["total ms wall/cpu"]
    print(" | ".join(head))
    for r in rows:
        cells = [f"{r[f'{s}_wall_ms']:.1f}/{r[f'{s}_cpu_ms']:.1f} ({r[f'{s}_modules']:g})" for s in STEPS]
        print(" | ".join([r["role"], r["rank"], *cells, f"{r['total_wall_ms']:.1f}/{r['total_cpu_ms']:.1f}"]))
    result = {"tp_size": args.tp_size, "launches": args.launches, "processes": rows, "raw": launches}
    if write_json(args.json, result):
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
