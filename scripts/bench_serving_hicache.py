#!/usr/bin/env python
"""cp-hicache-owner-lanes under pool pressure in real servers: overlay against upstream on the same replay.

STAND-IN: both sides are real 0.5.23 CPU servers (tiny offline model) on upstream's page-interleaved allocator
and host pool, one rank (``tests/support/real_server/owner_lanes.py``): striping across ranks, the PyNccl
gather, scratch admission and the disaggregation send filter are not exercised. Requests are ``max_tokens=1``
(the prefill worker's job; this allocator has no decode).

Replay (per seed, the same on both sides): ``--conversations`` conversations of uneven length (300-850
characters of GSM8K train text), ``--turns`` turns each appending 40-150 characters; turn-major order,
``--concurrency`` requests in flight through ``/v1/completions``. Per side and pool size one server, reused
across seeds and repeats, ``POST /flush_cache`` before each run (its ledger shows the pools back at their
start). Per side: ``loadbacks_served`` / ``loadbacks_refused`` (``UnifiedRadixCache.load_back`` outcomes,
counted by the stand-in on both sides), ``evicted_tokens`` (``sglang:evicted_tokens_total``),
``reprefilled_tokens`` (per request, the page-aligned longest prefix an earlier request of the replay had
prefilled, minus the server's cached tokens; summed), ``prompt_tokens_per_s``, ``logprob_mismatches``
(top-5 against the same prompt run cold after a flush, one flush per prompt). Each figure: median and range
over ``--repeats``. Cost: one launch per side and pool size; a replay is C x T requests.

Two modes (``--mode``), for two kinds of claim:

- ``deterministic`` (the default, for verdicts on cache counts): one request at a time, so each side's counts are
  a function of the replay alone. Each side runs the replay twice; the two runs must give the same counts (else
  the run is reported as not deterministic and the exit is 1). The verdict per cell is ``identical`` or
  ``different``, with overlay minus upstream for every count that differs (``prompt_tokens_per_s`` is a time,
  reported, never judged).
- ``concurrent`` (throughput): ``--concurrency`` requests in flight; which requests share a batch follows arrival
  timing, so cache counts move from run to run on either side. Figures: median and range over ``--repeats``. The
  verdict is on ``prompt_tokens_per_s`` only: the median overlay/upstream ratio (repeat against repeat) against
  the A/A band (each side's repeat against its previous one, on the same server), ``inside the A/A band`` or
  ``outside it by X``. This mode cannot separate patches on cache counts: they are reported, not judged.

    .venv/bin/python scripts/bench_serving_hicache.py --shards 4 --conversations 10 --turns 4 \
        --seed 7 11 23 --tokens-per-class 192 256 --json out/hicache.json --png out/hicache.png
    .venv/bin/python scripts/bench_serving_hicache.py --mode concurrent --concurrency 4 --repeats 3 \
        --seed 7 11 23 --tokens-per-class 192 256 --json out/hicache-concurrent.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from tests.support.real_server import owner_lanes as ol  # noqa: E402
from tests.support.real_server.model import GSM8K_TRAIN, build_tiny_model  # noqa: E402
from tests.support.real_server.server import running_server  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from bench_common import add_output_flags, ratio_verdict, require_sglang, write_json, write_outputs  # noqa: E402

SIDES = ("overlay", "upstream")
MEASURES = (
    "loadbacks_served",
    "loadbacks_refused",
    "evicted_tokens",
    "reprefilled_tokens",
    "prompt_tokens_per_s",
    "logprob_mismatches",
)

EXTRAS = ("cached_tokens", "owner_lane_capacity_evictions", "dropped_tokens")
# what the deterministic mode judges: every count both sides have (a time is reported, never judged; the patch's own
# counter has no upstream value to compare with)
COUNTS = tuple(m for m in (*MEASURES, *EXTRAS) if m not in ("prompt_tokens_per_s", "owner_lane_capacity_evictions"))


def conversations(seed: int, count: int, turns: int) -> list[list[str]]:
    """``count`` conversations of ``turns`` prompts each; prompt t extends prompt t-1."""
    rng = random.Random(seed)
    text = " ".join(json.loads(x)["question"] for x in GSM8K_TRAIN.read_text().splitlines())
    convs = []
    for _ in range(count):
        start = rng.randrange(0, len(text) - 2000)
        prompt = text[start : start + rng.randint(300, 850)]
        conv = []
        for _ in range(turns):
            conv.append(prompt)
            tail = rng.randrange(0, len(text) - 200)
            prompt = prompt + " " + text[tail : tail + rng.randint(40, 150)]
        convs.append(conv)
    return convs


def turn_major(convs: list[list[str]]) -> list[str]:
    return [conv[t] for t in range(len(convs[0])) for conv in convs]


def already_prefilled(order: list[str], tokenizer) -> list[int]:
    """Per request, the page-aligned longest token prefix shared with an earlier request of the replay."""
    ids = [tokenizer.encode(p) for p in order]
    out = []
    for i, cur in enumerate(ids):
        best = 0
        for prev in ids[:i]:
            n = 0
            for a, b in zip(cur, prev):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        out.append(min(best, len(cur) - 1) // ol.PAGE * ol.PAGE)
    return out


def replay(server, order: list[str], concurrency: int) -> tuple[list, float]:
    with httpx.Client(timeout=600) as client:
        ol.flush(client, server.url)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            answers = list(pool.map(lambda p: ol.complete(client, server.url, p), order))
        return answers, time.perf_counter() - t0


def cold_answers(server, order: list[str]) -> list:
    with httpx.Client(timeout=600) as client:
        out = []
        for prompt in order:
            ol.flush(client, server.url)
            out.append(ol.complete(client, server.url, prompt))
        ol.flush(client, server.url)
    return out


def measure(server, order, prefilled, cold, concurrency) -> dict:
    with httpx.Client(timeout=60) as client:
        before = ol.metric_sums(client.get(f"{server.url}/metrics").text)
        answers, wall = replay(server, order, concurrency)
        ol.flush(client, server.url)
        after = ol.metric_sums(client.get(f"{server.url}/metrics").text)
    found = ol.ledgers(server.log_text())
    start = found[0]["before"]
    problems = [p for entry in found[-2:] for p in ol.ledger_problems(entry, start)]
    loads0, loads1 = found[-2]["before"]["load_backs"], found[-1]["before"]["load_backs"]  # the run's two flushes
    delta = lambda name: after.get(name, 0.0) - before.get(name, 0.0)  # noqa: E731
    return {
        "loadbacks_served": loads1["served"] - loads0["served"],
        "loadbacks_refused": loads1["refused"] - loads0["refused"],
        "evicted_tokens": int(delta("sglang:evicted_tokens_total")),
        "reprefilled_tokens": sum(max(0, p - a.cached_tokens) for p, a in zip(prefilled, answers)),
        "cached_tokens": sum(a.cached_tokens for a in answers),
        "prompt_tokens_per_s": round(sum(a.prompt_tokens for a in answers) / wall, 1),
        "logprob_mismatches": sum(1 for a, c in zip(answers, cold) if not a.same_as(c)),
        "owner_lane_capacity_evictions": int(delta("sglang:cp_owner_lane_capacity_evictions_total")),
        "dropped_tokens": int(delta("sglang:hicache_dropped_tokens_total")),  # destroyed without a host copy
        "ledger_problems": problems,
    }


def summarize(runs: list[dict]) -> dict:
    out = {}
    for key in (*MEASURES, *EXTRAS):
        vals = [r[key] for r in runs]
        out[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    out["ledger_problems"] = sorted({p for r in runs for p in r["ledger_problems"]})
    return out


MORE_IS_BETTER = ("loadbacks_served", "cached_tokens")  # every other count: fewer is better


def deterministic_verdict(runs: dict) -> dict:
    """One request at a time: each side's runs must agree on every count; then the sides are compared exactly."""
    unstable = {side: [m for m in COUNTS if len({r[m] for r in runs[side]}) > 1] for side in SIDES}
    if any(unstable.values()):
        return {"verdict": "not deterministic", "unstable": unstable}
    ov, up = runs["overlay"][0], runs["upstream"][0]
    diff = {m: ov[m] - up[m] for m in COUNTS if ov[m] != up[m]}
    if not diff:
        return {"verdict": "identical", "overlay_minus_upstream": diff}
    better = {(d > 0) == (m in MORE_IS_BETTER) for m, d in diff.items()}
    way = {frozenset({True}): "overlay better", frozenset({False}): "overlay worse"}.get(frozenset(better), "mixed")
    return {"verdict": f"different ({way} on every count that differs)" if way != "mixed" else "different (mixed)",
            "overlay_minus_upstream": diff}  # fmt: skip


def concurrent_verdict(runs: dict) -> dict:
    """Throughput only: the median overlay/upstream ratio of ``prompt_tokens_per_s`` (repeat i against repeat i)
    against the A/A band (each side's repeat i+1 against its repeat i). Cache counts follow batching here: they
    are reported with their ranges, never judged (the deterministic mode judges them)."""
    ov, up = ([r["prompt_tokens_per_s"] for r in runs[side]] for side in SIDES)
    ab = [o / u for o, u in zip(ov, up)]
    aa = [b / a for side in (ov, up) for a, b in zip(side, side[1:])]
    return {"prompt_tokens_per_s": ratio_verdict(ab, aa, "higher"),
            "cache_counts": "reported, not judged: batching decides them in this mode"}  # fmt: skip


def log_dir(keep: Path | None):
    """A fresh folder for one pool size's server logs: under ``keep`` (kept), or a temporary one."""
    if keep is None:
        return tempfile.TemporaryDirectory()
    keep.mkdir(parents=True, exist_ok=True)
    return contextlib.nullcontext(tempfile.mkdtemp(dir=keep))


def bench(args) -> dict:
    from transformers import AutoTokenizer

    model = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model)
    cells, colds = [], {}  # cold answers per seed: a flushed pool's answer does not depend on its size
    for tokens in args.tokens_per_class:
        with log_dir(args.logs) as logs:
            configs = {side: ol.interleaved_config(side == "overlay", tokens, shards=args.shards) for side in SIDES}
            with (
                running_server(configs["overlay"], logs, model, timeout_s=args.launch_timeout) as ov,
                running_server(configs["upstream"], logs, model, timeout_s=args.launch_timeout) as up,
            ):
                servers = {"overlay": ov, "upstream": up}
                for seed in args.seed:
                    order = turn_major(conversations(seed, args.conversations, args.turns))
                    prefilled = already_prefilled(order, tokenizer)
                    if seed not in colds:
                        colds[seed] = cold_answers(ov, order)
                    cold = colds[seed]
                    runs = {side: [] for side in SIDES}
                    for rep in range(args.repeats):
                        for side in SIDES if rep % 2 == 0 else SIDES[::-1]:
                            runs[side].append(measure(servers[side], order, prefilled, cold, args.concurrency))
                    cell = {"tokens_per_class": tokens, "seed": seed, "requests": len(order), "mode": args.mode}
                    cell.update({side: summarize(runs[side]) for side in SIDES})
                    if args.mode == "deterministic":
                        cell["verdict"] = deterministic_verdict(runs)
                    else:
                        cell["verdict"] = concurrent_verdict(runs)
                    cell["runs"] = runs
                    cells.append(cell)
                    print(row(cell), flush=True)
                    write_json(args.json, {"config": config(args), "cells": cells, "partial": True})
    return {"config": config(args), "cells": cells}


def config(args) -> dict:
    return {
        "shards": args.shards,
        "page_size": ol.PAGE,
        "conversations": args.conversations,
        "turns": args.turns,
        "seeds": args.seed,
        "tokens_per_class": args.tokens_per_class,
        "repeats": args.repeats,
        "mode": args.mode,
        "concurrency": args.concurrency,
        "stand_in": "one CPU rank, upstream's PageInterleavePoolAllocator + PageInterleaveHostPool (identity "
        "placement); not exercised: striping, PyNccl gather, scratch admission, PD send filter",
    }


HEADER = f"{'tok/cls':>7} {'seed':>4}  {'side':<8}" + "".join(f" {m[:20]:>21}" for m in MEASURES)


def spread(stat: dict) -> str:
    return f"{stat['median']:g} [{stat['min']:g}-{stat['max']:g}]"


def row(cell: dict) -> str:
    lines = []
    for side in SIDES:
        s = cell[side]
        vals = "".join(f" {spread(s[m]):>21}" for m in MEASURES)
        lines.append(f"{cell['tokens_per_class']:>7} {cell['seed']:>4}  {side:<8}{vals}")
    v = cell["verdict"]
    if cell["mode"] == "deterministic":
        detail = v.get("overlay_minus_upstream") or v.get("unstable") or ""
        lines.append(f"{'':>14}verdict: {v['verdict']} {detail}".rstrip())
    else:
        t = v["prompt_tokens_per_s"]
        lines.append(f"{'':>14}prompt tokens/s overlay/upstream {t['ab_median']:g} {t['ab_range']}, A/A band "
                     f"{t['aa_band']}: {t['verdict']}; cache counts not judged in this mode")  # fmt: skip
    return "\n".join(lines)


def draw(path: Path, result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = result["cells"]
    labels = [f"{c['tokens_per_class']}/s{c['seed']}" for c in cells]
    fig, ax = plt.subplots(figsize=(max(6, len(cells) * 1.2), 4))
    for i, side in enumerate(SIDES):
        med = [c[side]["reprefilled_tokens"]["median"] for c in cells]
        lo = [m - c[side]["reprefilled_tokens"]["min"] for m, c in zip(med, cells)]
        hi = [c[side]["reprefilled_tokens"]["max"] - m for m, c in zip(med, cells)]
        ax.bar([x + i * 0.4 for x in range(len(cells))], med, 0.4, yerr=[lo, hi], label=side, capsize=3)
    ax.set_xticks([x + 0.2 for x in range(len(cells))], labels, rotation=30)
    ax.set_ylabel("re-prefilled tokens (median, range)")
    ax.set_xlabel("tokens per owner class / seed")
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=4, help="owner classes N (default 4)")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--seed", type=int, nargs="+", default=[7])
    parser.add_argument("--tokens-per-class", type=int, nargs="+", default=[192], help="device pool per class")
    parser.add_argument(
        "--mode", choices=("deterministic", "concurrent"), default="deterministic",
        help="deterministic (default): one request at a time, exact counts, two runs per side; concurrent: throughput",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, help="runs per side and seed (default 2 deterministic, 3 concurrent)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight (concurrent mode)")
    parser.add_argument("--launch-timeout", type=float, default=300.0, help="seconds a server may take to be ready")
    parser.add_argument("--logs", type=Path, help="keep the servers' logs under this folder (default: discarded)")
    add_output_flags(parser, "one seed, 6 conversations of 3 turns, 2 repeats")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.mode == "deterministic" else 3
    if args.mode == "deterministic":
        if args.repeats < 2:
            parser.error("--mode deterministic runs each side at least twice (--repeats >= 2): that is its check")
        args.concurrency = 1
    if args.shards < 2 or args.conversations < 1 or args.turns < 1 or args.repeats < 1 or args.concurrency < 1:
        parser.error("--shards must be >= 2; --conversations, --turns, --repeats, --concurrency >= 1")
    if any(t < ol.PAGE or t % ol.PAGE for t in args.tokens_per_class):
        parser.error(f"--tokens-per-class must be positive multiples of the page ({ol.PAGE})")
    if args.quick:
        args.seed, args.conversations, args.turns, args.repeats = args.seed[:1], 6, 3, 2
    require_sglang(">=0.5.23", "bench_serving_hicache", "It needs upstream's page-interleaved allocator (0.5.23).")
    print(HEADER, flush=True)
    result = bench(args)
    write_outputs(args, result, print, lambda p: draw(p, result))
    return 1 if any(c["verdict"].get("verdict") == "not deterministic" for c in result["cells"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
