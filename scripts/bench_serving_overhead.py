#!/usr/bin/env python
"""Serving overhead of the overlay in a real SGLang server on the CPU: the same server flags with and
without the overlay, side by side in one run (tiny offline model, tests/support/real_server).

Per round, one launch per side, in alternating order (overlay first in even rounds, upstream first in odd
ones) so that warm-up effects and background load fall on both sides alike. Each launch measures
- time to ready: process start to ``/health`` and ``/v1/models`` answering (warm-up request included);
- throughput: output tokens/s of ``--streams`` (8) concurrent streaming completions of ``--tokens`` tokens
  each (ignore_eos, greedy), after one warm-up request; tokens are the server's own usage counts.
Reports medians over rounds: ``startup_ratio`` = overlay / upstream time to ready (goal <= 1.05) and
``throughput_ratio`` = overlay / upstream tokens/s (goal >= 0.98). Both sides carry the CPU stand-ins
(``SGLANG_PLUGINS=cpu_standins[,sglang_overlay]``).

    .venv/bin/python scripts/bench_serving_overhead.py --quick --json out/serving_overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from tests.support.real_server.model import build_tiny_model  # noqa: E402
from tests.support.real_server.server import ServerConfig, running_server  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from bench_common import add_output_flags, write_json  # noqa: E402

GOALS = {"startup_ratio": ("<=", 1.05), "throughput_ratio": (">=", 0.98)}


def stream_tokens(url: str, tokens: int, out: list, idx: int) -> None:
    body = {"model": "default", "prompt": f"Stream {idx}: Natalia sold clips to 48 of her friends.",
            "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    used = 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("data: {") and '"usage"' in line:
                usage = json.loads(line[6:]).get("usage") or {}
                used = usage.get("completion_tokens") or used
    out[idx] = used


def throughput(url: str, streams: int, tokens: int) -> float:
    warm = [0]
    stream_tokens(url, 16, warm, 0)
    counts = [0] * streams
    threads = [threading.Thread(target=stream_tokens, args=(url, tokens, counts, i)) for i in range(streams)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if sum(counts) != streams * tokens:
        raise RuntimeError(f"expected {streams * tokens} output tokens, the server reported {sum(counts)}")
    return sum(counts) / wall


def measure(overlay: bool, model: Path, log_dir: Path, streams: int, tokens: int) -> dict:
    config = ServerConfig(overlay=overlay, max_running_requests=max(8, streams))
    with running_server(config, log_dir, model) as server:
        ready = server.time_to_ready
        tps = throughput(server.url, streams, tokens)
    return {"side": "overlay" if overlay else "upstream", "time_to_ready_s": round(ready, 3), "tokens_per_s": round(tps, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_flags(ap, quick="1 round, 128 tokens per stream", png="a bar chart of both sides")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--log-dir", metavar="DIR", help="server logs (default: a temporary directory)")
    args = ap.parse_args(argv)
    rounds, tokens = (1, 128) if args.quick else (args.rounds, args.tokens)
    model = build_tiny_model()
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="bench-serving-"))
    runs = []
    for r in range(rounds):
        for overlay in ((True, False) if r % 2 == 0 else (False, True)):
            run = measure(overlay, model, log_dir, args.streams, tokens)
            run["round"] = r
            runs.append(run)
            print(f"round {r} {run['side']:8s} ready {run['time_to_ready_s']:7.2f} s  {run['tokens_per_s']:8.1f} tok/s",
                  flush=True)
    med = {side: {k: statistics.median(x[k] for x in runs if x["side"] == side) for k in ("time_to_ready_s", "tokens_per_s")}
           for side in ("overlay", "upstream")}
    result = {
        "rounds": rounds, "streams": args.streams, "tokens_per_stream": tokens, "runs": runs, "median": med,
        "startup_ratio": round(med["overlay"]["time_to_ready_s"] / med["upstream"]["time_to_ready_s"], 4),
        "throughput_ratio": round(med["overlay"]["tokens_per_s"] / med["upstream"]["tokens_per_s"], 4),
        "goals": {k: f"{op} {v}" for k, (op, v) in GOALS.items()},
    }
    print(f"\n{'':10s}{'time to ready (s)':>20s}{'tokens/s':>12s}")
    for side in ("upstream", "overlay"):
        print(f"{side:10s}{med[side]['time_to_ready_s']:20.2f}{med[side]['tokens_per_s']:12.1f}")
    for key, (op, goal) in GOALS.items():
        ok = result[key] <= goal if op == "<=" else result[key] >= goal
        print(f"{key}: {result[key]:.4f} (goal {op} {goal}: {'met' if ok else 'NOT met'})")
    write_json(args.json, result)
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(8, 3))
        for ax, key, label in ((axes[0], "time_to_ready_s", "time to ready (s)"), (axes[1], "tokens_per_s", "tokens/s")):
            ax.bar(["upstream", "overlay"], [med["upstream"][key], med["overlay"][key]], color=["grey", "tab:blue"])
            ax.set_title(label)
        fig.tight_layout()
        fig.savefig(args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
