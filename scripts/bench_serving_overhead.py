#!/usr/bin/env python
"""Serving overhead of the overlay in a real SGLang server on the CPU: the same server flags with and
without the overlay, side by side in one run (tiny offline model, tests/support/real_server).

Per round, in alternating order (overlay first in even rounds, upstream first in odd ones):
- time to ready: one launch per side, alone on the machine, from process start to ``/health`` and
  ``/v1/models`` answering (warm-up request included), polled every 0.1 s;
- throughput: both sides launched together, then ``--bursts`` bursts per side, alternating side by side
  (A B B A ...), each burst ``--streams`` (8) concurrent streaming completions of ``--tokens`` tokens
  (ignore_eos, greedy), tokens counted from the server's own usage. The side not bursting is suspended
  (SIGSTOP on each of its processes, SIGCONT after): an idle SGLang scheduler busy-polls, and two of them
  on 2 cores cut throughput tenfold. A burst pair shares the machine's minute: on 2 shared cores one
  launch's throughput varies by tens of percent between launches, far more than the overhead under
  test, while bursts paired inside one pair of launches vary much less.
Reports the median over all pairs of the ratio overlay / upstream: ``startup_ratio`` (per round, goal
<= 1.05) and ``throughput_ratio`` (per burst pair, goal >= 0.98), with the pairs' min and max. Both sides
carry the CPU stand-ins (``SGLANG_PLUGINS=cpu_standins[,sglang_overlay]``).
``--tp-size 2``: both sides are ``--tp-size 2`` servers (one core per rank, NCCL kept out). ``--cluster-rounds K``:
K rounds of two overlay nodes on loopback, with the cluster check and with it disabled on both nodes, alternating:
node 0's time to ready and each rank's own timing of the check (the start-up cost of ``cluster-consistency``).

    .venv/bin/python scripts/bench_serving_overhead.py --quick --json out/serving_overhead.json
    .venv/bin/python scripts/bench_serving_overhead.py --tp-size 2 --rounds 2 --bursts 4 --cluster-rounds 2 \
        --json out/serving_overhead_tp2.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from tests.support.real_server.cluster import cluster_checks, tensor_parallel, two_nodes  # noqa: E402
from tests.support.real_server.model import build_tiny_model  # noqa: E402
from tests.support.real_server.server import ServerConfig, running_server  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from bench_common import add_output_flags, write_json  # noqa: E402

GOALS = {"startup_ratio": ("<=", 1.05), "throughput_ratio": (">=", 0.98)}


def stream_tokens(url: str, tokens: int, out: list, idx: int) -> None:
    body = {
        "model": "default",
        "prompt": f"Stream {idx}: Natalia sold clips to 48 of her friends.",
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    used = 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("data: {") and '"usage"' in line:
                usage = json.loads(line[6:]).get("usage") or {}
                used = usage.get("completion_tokens") or used
    out[idx] = used


def burst(url: str, streams: int, tokens: int) -> float:
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


TP_SIZE = [1]  # --tp-size: ranks per server (one core each)


def config(overlay: bool, streams: int) -> ServerConfig:
    base = ServerConfig(overlay=overlay, max_running_requests=max(8, streams))
    return tensor_parallel(base, TP_SIZE[0]) if TP_SIZE[0] > 1 else base


def time_to_ready(overlay: bool, model: Path, log_dir: Path, streams: int) -> float:
    with running_server(config(overlay, streams), log_dir, model, poll_s=0.1) as server:
        return server.time_to_ready


def cluster_check(model: Path, log_dir: Path, rounds: int) -> list:
    """Two overlay nodes on loopback, with the cluster check and with it disabled on both nodes (alternating):
    node 0's time to ready, and the seconds each rank's check says it took (its INFO line)."""
    runs = []
    for r in range(rounds):
        for check in (True, False) if r % 2 == 0 else (False, True):
            env = () if check else (("SGLANG_OVERLAY_DISABLE", "cluster-consistency"),)
            config = ServerConfig(env=env)
            with two_nodes(log_dir / f"cluster-{r}-{check}", node0=config, node1=config) as (node0, node1):
                logs = node0.log_text() + node1.log_text()
                ready = node0.time_to_ready
            seconds = [checked[2] for checked in cluster_checks(logs)]
            runs.append({"round": r, "check": check, "time_to_ready_s": round(ready, 3), "check_s": seconds})
            print(f"two nodes, round {r}, check {'on ' if check else 'off'}: ready {ready:7.2f} s, "
                  f"check per rank {seconds} s", flush=True)  # fmt: skip
    return runs


def paired_bursts(order: tuple, model: Path, log_dir: Path, streams: int, tokens: int, bursts: int) -> list:
    """Both sides up at once; ``bursts`` bursts each, alternating A B B A ...; one dict per burst pair."""
    with (
        running_server(config(order[0], streams), log_dir, model) as first,
        running_server(config(order[1], streams), log_dir, model) as second,
    ):
        url = {order[0]: first.url, order[1]: second.url}
        server_of = {order[0]: first, order[1]: second}
        for side in order:  # warm-up: a whole burst (the first batch of a new size is slower)
            with suspended(server_of[not side]):
                burst(url[side], streams, 32)
        pairs = []
        for i in range(bursts):
            pair = {}
            for side in order if i % 2 == 0 else order[::-1]:
                name = "overlay" if side else "upstream"
                with suspended(server_of[not side]), cpu_used(server_of[side]) as cpu:
                    pair[name] = round(burst(url[side], streams, tokens), 2)
                pair[f"{name}_cpu_ms_per_token"] = {role: round(ms / (streams * tokens), 4) for role, ms in cpu.items()}
            pairs.append(pair)
    return pairs


def _role(proc) -> str:
    name = proc.name()
    return name.split("::", 1)[1].split(":")[0] if name.startswith("sglang::") else "http_server"


@contextmanager
def cpu_used(server):
    """CPU milliseconds (user + system) each process role of ``server`` used during the block."""
    procs = server.processes()
    before = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
    used: dict = {}
    yield used
    for proc in procs:
        try:
            ms = (sum(proc.cpu_times()[:2]) - before[proc.pid]) * 1e3
        except Exception:  # psutil.Error: the process went
            continue
        used[_role(proc)] = used.get(_role(proc), 0.0) + ms


@contextmanager
def suspended(server):
    """Every process of ``server`` stopped (SIGSTOP) for the block, continued after."""
    procs = server.processes()
    for proc in procs:
        proc.suspend()
    try:
        yield
    finally:
        for proc in procs:
            proc.resume()


def ratios(rows: list, metric: str | None = None) -> list:
    """overlay / upstream per pair (``rows``: dicts with both sides, or runs grouped by round)."""
    if metric is not None:
        by_round = {}
        for run in rows:
            by_round.setdefault(run["round"], {})[run["side"]] = run[metric]
        rows = [r for _, r in sorted(by_round.items())]
    return [r["overlay"] / r["upstream"] for r in rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_flags(ap, quick="1 round, 128 tokens per stream, 2 bursts", png="the paired ratios with their goals")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bursts", type=int, default=8, help="throughput bursts per side per round")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--tp-size", type=int, default=1, help="ranks per server, one core each (--tp-size 2: 2 cores)")
    ap.add_argument("--cluster-rounds", type=int, default=0,
                    help="also launch two overlay nodes on loopback this many times, with the cluster check and "
                         "without (its start-up cost)")  # fmt: skip
    ap.add_argument("--log-dir", metavar="DIR", help="server logs (default: a temporary directory)")
    args = ap.parse_args(argv)
    if args.tp_size < 1:
        ap.error("--tp-size is at least 1")
    TP_SIZE[0] = args.tp_size
    rounds, tokens, bursts = (1, 128, 2) if args.quick else (args.rounds, args.tokens, args.bursts)
    model = build_tiny_model()
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="bench-serving-"))
    starts, pairs = [], []
    for r in range(rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        for overlay in order:
            ready = time_to_ready(overlay, model, log_dir, args.streams)
            starts.append(
                {"round": r, "side": "overlay" if overlay else "upstream", "time_to_ready_s": round(ready, 3)}
            )
            print(f"round {r} {starts[-1]['side']:8s} ready {ready:7.2f} s", flush=True)
        for pair in paired_bursts(order, model, log_dir, args.streams, tokens, bursts):
            pairs.append({"round": r, **pair})
            cpu = "  ".join(
                f"{side[0]}:{role}={ms:.3f}"
                for side in ("upstream", "overlay")
                for role, ms in sorted(pair[f"{side}_cpu_ms_per_token"].items())
            )
            print(
                f"round {r} burst pair  upstream {pair['upstream']:8.1f} tok/s  overlay {pair['overlay']:8.1f} tok/s"
                f"  cpu ms/token {cpu}",
                flush=True,
            )
    cluster = cluster_check(model, log_dir, args.cluster_rounds) if args.cluster_rounds else []
    paired = {"startup_ratio": ratios(starts, "time_to_ready_s"), "throughput_ratio": ratios(pairs)}
    med = {
        side: {
            "time_to_ready_s": statistics.median(x["time_to_ready_s"] for x in starts if x["side"] == side),
            "tokens_per_s": statistics.median(x[side] for x in pairs),
        }
        for side in ("overlay", "upstream")
    }
    result = {
        "tp_size": args.tp_size,
        "rounds": rounds,
        "streams": args.streams,
        "tokens_per_stream": tokens,
        "bursts_per_side_per_round": bursts,
        "starts": starts,
        "burst_pairs": pairs,
        "median": med,
        **{key: round(statistics.median(r), 4) for key, r in paired.items()},
        "paired_ratios": {key: [round(x, 4) for x in r] for key, r in paired.items()},
        "goals": {k: f"{op} {v}" for k, (op, v) in GOALS.items()},
        "two_nodes": cluster,
    }
    print(f"\n{'':10s}{'time to ready (s)':>20s}{'tokens/s':>12s}")
    for side in ("upstream", "overlay"):
        print(f"{side:10s}{med[side]['time_to_ready_s']:20.2f}{med[side]['tokens_per_s']:12.1f}")
    for key, (op, goal) in GOALS.items():
        ok = result[key] <= goal if op == "<=" else result[key] >= goal
        spread = f"paired min {min(paired[key]):.4f} max {max(paired[key]):.4f}"
        print(f"{key}: {result[key]:.4f} (goal {op} {goal}: {'met' if ok else 'NOT met'}; {spread})")
    if cluster:
        on = [x for x in cluster if x["check"]]
        off = [x for x in cluster if not x["check"]]
        check_s = [s for x in on for s in x["check_s"]]
        print(f"two nodes: ready {statistics.median(x['time_to_ready_s'] for x in on):.2f} s with the cluster check, "
              f"{statistics.median(x['time_to_ready_s'] for x in off):.2f} s without; the check itself "
              f"{min(check_s):.3f}-{max(check_s):.3f} s per rank")  # fmt: skip
    write_json(args.json, result)
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(9, 3))
        for ax, key, goal in ((axes[0], "startup_ratio", 1.05), (axes[1], "throughput_ratio", 0.98)):
            ax.plot(range(1, len(paired[key]) + 1), paired[key], "o", color="tab:blue")
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.axhline(goal, color="tab:red", linestyle="--", linewidth=0.8, label=f"goal {goal}")
            ax.set_title(f"{key} per pair (median {result[key]:.3f})")
            ax.set_xlabel("pair")
            ax.legend()
        fig.tight_layout()
        fig.savefig(args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
