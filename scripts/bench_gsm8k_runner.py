#!/usr/bin/env python
"""Benchmark: is the GSM8K runner ever the bottleneck? The full 1,319 questions at --parallel 64.

Starts the scripted OpenAI server (tests/support/scripted_server.py: upstream 0.5.20's
own HTTP routes and OpenAI handlers, overlay applied, a scripted answerer that replies
with each question's gold worked answer), then runs ``scripts/gsm8k_eval.py`` against
it in its own process, as a user would, once per mode. Reports wall time, requests
per second, output tokens per second, latency p50/p99, accuracy (must be 1.000: the
script answers every question correctly) and the CPU seconds the runner and the
server each spent (from /proc), so the runner's share is visible. Goal: the full run
finishes in under 30 s on this machine. Prints a table, writes JSON; exit 1 when a
run misses the goal or is not exact.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

GOAL_S = 30.0
MODES = {
    "completions": [],
    "completions-stream": ["--stream"],
    "chat": ["--mode", "chat"],
}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_mode(base_url: str, server_pid: int, mode: str, args: argparse.Namespace, out_root: Path) -> dict:
    out_dir = out_root / mode
    cmd = [sys.executable, str(REPO / "scripts" / "gsm8k_eval.py"), "--base-url", base_url,
           "--data-dir", args.data_dir, "--no-download", "--parallel", str(args.parallel),
           "--output", str(out_dir), "--no-progress", *MODES[mode]]
    if args.num_questions:
        cmd += ["--num-questions", str(args.num_questions)]
    server_cpu0, runner_cpu0, t0 = cpu_seconds(server_pid), children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    process_wall = time.perf_counter() - t0
    server_cpu, runner_cpu = cpu_seconds(server_pid) - server_cpu0, children_cpu() - runner_cpu0
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: runner exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    s = json.loads((out_dir / "summary.json").read_text())
    return {
        "mode": mode, "num_questions": s["num_questions"], "parallel": args.parallel,
        "accuracy": s["accuracy"], "errors": s["error_count"], "invalid": s["invalid_count"],
        "wall_s": s["wall_s"], "process_wall_s": round(process_wall, 3),
        "requests_per_s": s["requests_per_s"], "output_tokens_per_s": s["output_tokens_per_s"],
        "latency_p50_s": s["latency_p50_s"], "latency_p99_s": s["latency_p99_s"],
        "runner_cpu_s": round(runner_cpu, 3), "server_cpu_s": round(server_cpu, 3),
        "runner_cpu_share": round(runner_cpu / (runner_cpu + server_cpu), 3) if runner_cpu + server_cpu else None,
        "goal_s": GOAL_S, "goal_met": s["wall_s"] < GOAL_S,
        "exact": s["accuracy"] == 1.0 and s["error_count"] == 0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="completions", help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--parallel", type=int, default=64)
    ap.add_argument("--num-questions", type=int, help="default: all 1,319")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "gsm8k"))
    ap.add_argument("--json", default="bench_gsm8k_runner.json")
    ap.add_argument("--keep-output", metavar="DIR", help="keep each run's results/summary/report/PNGs here")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        ap.error(f"unknown modes {sorted(unknown)}")

    from rich.console import Console
    from rich.table import Table

    from tests.support.scripted_server import serve_openai

    console = Console(width=max(130, Console().width))
    out_root = Path(args.keep_output or tempfile.mkdtemp(prefix="bench-gsm8k-"))
    env = {"GSM8K_SCRIPT_PLAN": "{}", "GSM8K_SCRIPT_DATA": args.data_dir}
    rows = []
    with serve_openai("tests.support.gsm8k_script:answer", env=env, startup_timeout_s=180) as server:
        for mode in modes:
            rows.append(run_mode(server.base_url, server.process.pid, mode, args, out_root))
    table = Table(title=f"GSM8K runner vs the scripted upstream server (parallel {args.parallel}, goal < {GOAL_S:g} s)")
    cols = [("mode", "mode", "{}"), ("questions", "num_questions", "{}"), ("wall s", "wall_s", "{:.2f}"),
            ("req/s", "requests_per_s", "{:.1f}"), ("out tok/s", "output_tokens_per_s", "{:.0f}"),
            ("p50 s", "latency_p50_s", "{:.3f}"), ("p99 s", "latency_p99_s", "{:.3f}"),
            ("runner CPU s", "runner_cpu_s", "{:.2f}"), ("server CPU s", "server_cpu_s", "{:.2f}"),
            ("accuracy", "accuracy", "{:.3f}"), ("goal", "goal_met", "{}")]
    for label, _, _ in cols:
        table.add_column(label, justify="left" if label == "mode" else "right")
    for r in rows:
        table.add_row(*(fmt.format(r[key]) for _, key, fmt in cols))
    console.print(table)
    result = {"benchmark": "gsm8k_runner", "machine_cpus": os.cpu_count(), "goal_s": GOAL_S, "runs": rows}
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.json}; run outputs in {out_root}")
    ok = all(r["goal_met"] and r["exact"] for r in rows)
    if not ok:
        console.print("[red]goal missed or run not exact (see table)[/red]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
