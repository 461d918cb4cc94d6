#!/usr/bin/env python
"""Benchmark: is the GSM8K runner ever the bottleneck? The full 1,319 questions at --parallel 64.

Starts the scripted OpenAI server (tests/support/scripted_server.py: the installed upstream's
own HTTP routes and OpenAI handlers, overlay applied, a scripted answerer that replies
with each question's gold worked answer), then runs ``scripts/gsm8k_eval.py`` against
it in its own process, as a user would, once per mode. Reports wall time, requests
per second, output tokens per second, latency p50/p99, accuracy (must be 1.000: the
script answers every question correctly) and the CPU seconds the runner and the
server each spent (from /proc), so the runner's share is visible.

Goal: at least 1,319 / 30 s = 44 requests per second (the full run in under 30 s on
this machine). Prints a table; exit 1 when a run misses the goal or is not exact,
2 when the data is missing.

    .venv/bin/python scripts/bench_gsm8k_runner.py --quick            # the committed fixture, 60 questions
    .venv/bin/python scripts/bench_gsm8k_runner.py --modes completions,completions-stream,chat \\
        --json out/gsm8k_runner.json --png out/gsm8k_runner.png       # the full splits

Data: ``--data-dir``, else (``--quick``) the committed fixture tests/data/gsm8k, else the
full splits where the tests find them (../shared/data/gsm8k or the runner's cache).
Files are written only where told (``--json``, ``--png``, ``--keep-output``).
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
sys.path.insert(0, str(REPO / "scripts"))

from bench_common import add_output_flags, write_json  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FULL_QUESTIONS = 1319
GOAL_S = 30.0  # for the full run; every run is held to the same rate
GOAL_RPS = FULL_QUESTIONS / GOAL_S
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
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "gsm8k_eval.py"),
        "--base-url",
        base_url,
        "--data-dir",
        args.data_dir,
        "--no-download",
        "--parallel",
        str(args.parallel),
        "--output",
        str(out_dir),
        "--no-progress",
        *MODES[mode],
    ]
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
        "mode": mode,
        "num_questions": s["num_questions"],
        "parallel": args.parallel,
        "accuracy": s["accuracy"],
        "errors": s["error_count"],
        "invalid": s["invalid_count"],
        "wall_s": s["wall_s"],
        "process_wall_s": round(process_wall, 3),
        "requests_per_s": s["requests_per_s"],
        "output_tokens_per_s": s["output_tokens_per_s"],
        "latency_p50_s": s["latency_p50_s"],
        "latency_p99_s": s["latency_p99_s"],
        "runner_cpu_s": round(runner_cpu, 3),
        "server_cpu_s": round(server_cpu, 3),
        "runner_cpu_share": round(runner_cpu / (runner_cpu + server_cpu), 3) if runner_cpu + server_cpu else None,
        "goal_requests_per_s": GOAL_RPS,
        "goal_met": s["requests_per_s"] >= GOAL_RPS,
        "exact": s["accuracy"] == 1.0 and s["error_count"] == 0,
    }


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_flags(
        ap,
        quick="the committed 60-question fixture (under a minute); the goal rate is the same",
        png="a chart (requests/s per mode against the goal)",
    )
    ap.add_argument("--modes", help=f"comma list of {', '.join(MODES)} (default: completions)")
    ap.add_argument("--parallel", type=int, default=64)
    ap.add_argument("--num-questions", type=int, help="the first N (default: every question of the data)")
    ap.add_argument("--data-dir", help="directory with test.jsonl and train.jsonl (default: see the docstring)")
    ap.add_argument("--keep-output", metavar="DIR", help="keep each run's results/summary/report/PNGs here")
    args = ap.parse_args(argv)
    args.modes = [m.strip() for m in (args.modes or "completions").split(",") if m.strip()]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        ap.error(f"unknown modes {sorted(unknown)}")
    return args


def data_dir_for(args: argparse.Namespace) -> Path | None:
    from tests.support.env import GSM8K_DIR, full_gsm8k_dir

    if args.data_dir:
        return Path(args.data_dir)
    return GSM8K_DIR if args.quick else full_gsm8k_dir()


COLUMNS = [
    ("mode", "mode", "{}"),
    ("questions", "num_questions", "{}"),
    ("wall s", "wall_s", "{:.2f}"),
    ("req/s", "requests_per_s", "{:.1f}"),
    ("out tok/s", "output_tokens_per_s", "{:.0f}"),
    ("p50 s", "latency_p50_s", "{:.3f}"),
    ("p99 s", "latency_p99_s", "{:.3f}"),
    ("runner CPU s", "runner_cpu_s", "{:.2f}"),
    ("server CPU s", "server_cpu_s", "{:.2f}"),
    ("accuracy", "accuracy", "{:.3f}"),
    ("goal", "goal_met", "{}"),
]


def print_table(rows: list[dict], parallel: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"GSM8K runner vs the scripted upstream server (parallel {parallel}, "
        f"goal >= {GOAL_RPS:.1f} req/s: {FULL_QUESTIONS} questions in {GOAL_S:g} s)"
    )
    for label, _, _ in COLUMNS:
        table.add_column(label, justify="left" if label == "mode" else "right")
    for r in rows:
        table.add_row(*(fmt.format(r[key]) for _, key, fmt in COLUMNS))
    Console(width=max(130, Console().width)).print(table)


def write_png(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate, cpu) = plt.subplots(1, 2, figsize=(10, 4))
    modes = [r["mode"] for r in rows]
    rate.bar(modes, [r["requests_per_s"] for r in rows], color="tab:blue")
    rate.axhline(GOAL_RPS, color="tab:red", linestyle="--", label=f"goal {GOAL_RPS:.1f} req/s")
    rate.set_ylabel("requests / s")
    rate.set_title(f"{rows[0]['num_questions']} questions, parallel {rows[0]['parallel']}")
    rate.legend()
    cpu.bar(modes, [r["server_cpu_s"] for r in rows], label="server", color="tab:gray")
    cpu.bar(
        modes,
        [r["runner_cpu_s"] for r in rows],
        bottom=[r["server_cpu_s"] for r in rows],
        label="runner",
        color="tab:orange",
    )
    cpu.set_ylabel("CPU seconds")
    cpu.set_title("where the CPU went")
    cpu.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    data_dir = data_dir_for(args)
    if data_dir is None:
        print(
            "bench_gsm8k_runner: the full run needs the full GSM8K splits (../shared/data/gsm8k or "
            "~/.cache/sglang-overlay/gsm8k); pass --data-dir DIR, or --quick for the committed fixture"
        )
        return 2
    args.data_dir = str(data_dir)

    from tests.support.scripted_server import serve_openai

    env = {"GSM8K_SCRIPT_PLAN": "{}", "GSM8K_SCRIPT_DATA": args.data_dir}
    with tempfile.TemporaryDirectory(prefix="bench-gsm8k-") as scratch:
        out_root = Path(args.keep_output or scratch)
        with serve_openai("tests.support.gsm8k_script:answer", env=env, startup_timeout_s=180) as server:
            rows = [run_mode(server.base_url, server.process.pid, mode, args, out_root) for mode in args.modes]
    print_table(rows, args.parallel)
    result = {
        "benchmark": "gsm8k_runner",
        "quick": args.quick,
        "data_dir": args.data_dir,
        "machine_cpus": os.cpu_count(),
        "goal_requests_per_s": GOAL_RPS,
        "runs": rows,
    }
    written = []
    if write_json(args.json, result):
        written.append(args.json)
    if args.png:
        write_png(Path(args.png), rows)
        written.append(args.png)
    if args.keep_output:
        written.append(f"run outputs in {args.keep_output}")
    if written:
        print("wrote " + ", ".join(written))
    ok = all(r["goal_met"] and r["exact"] for r in rows)
    if not ok:
        print("goal missed or run not exact (see table)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
