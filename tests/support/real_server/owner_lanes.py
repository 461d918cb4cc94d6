"""A page-interleaved HiCache server on one CPU rank (STAND-IN, ``standins/sglang_cpu_standins/page_interleave.py``),
and what its answers, metrics and log say: shared by ``tests/e2e/test_09_owner_lanes_live.py`` and
``scripts/bench_serving_hicache.py``.

``interleaved_config(overlay, tokens_per_class)``: upstream's ``PageInterleavePoolAllocator`` (``SHARDS`` owner
classes of ``tokens_per_class`` tokens) and page-interleaved host pool, HiCache write-through, page 16, the Python
tree core, metrics and per-request cache reports on, no warm-up (the allocator has no decode: ``max_tokens=1``).
What it does not exercise: striping across ranks, the PyNccl gather, scratch admission, the disaggregation send
filter. ``complete(client, url, prompt)``: one ``/v1/completions`` with ``max_tokens=1, logprobs=5``, reduced to
the top-5 and the server's cached-token count. Invariant: both sides of a comparison get the same flags and
stand-ins; only ``SGLANG_PLUGINS`` (and an optional ``SGLANG_OVERLAY_DISABLE``) differs. Cost: one launch each.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tests.support.real_server.server import ServerConfig

SHARDS = 4
PAGE = 16
PLAIN_SETTING = "SGLANG_CPU_STANDINS_PAGE_INTERLEAVE"
LEDGER = re.compile(r"page-interleave stand-in ledger: (\{.*\})")
CACHED = re.compile(r"#cached-token: (\d+)")
LOGPROB_TOL = 1e-4  # float32 on the CPU: a prefix served from the cache and a cold prefill agree to ~1e-6


def interleaved_config(overlay: bool, tokens_per_class: int = 256, disable: str = "", shards: int = SHARDS):
    """One side of the comparison (the same flags and stand-ins on both)."""
    args = (
        "--page-size",
        str(PAGE),
        "--max-total-tokens",
        str(tokens_per_class),  # the allocator holds shards x this many logical slots
        "--chunked-prefill-size",
        "256",
        "--hicache-write-policy",
        "write_through",
        # explicit: upstream's auto-size refuses to start when the machine has under 10 GiB free (a loaded CI host)
        "--hicache-ratio",
        "2",
        "--skip-server-warmup",  # warm-up decodes 8 tokens; this allocator has no decode
        "--enable-metrics",
        "--enable-cache-report",
    )
    env = [(PLAIN_SETTING, str(shards)), ("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python")]
    if disable:
        env.append(("SGLANG_OVERLAY_DISABLE", disable))
    return ServerConfig(overlay=overlay, hicache=True, max_running_requests=4, extra_args=args, env=tuple(env))


@dataclass(frozen=True)
class Answer:
    """The one generated token's top-5 (token -> logprob) and the prompt tokens the server reports cached."""

    top5: tuple
    prompt_tokens: int
    cached_tokens: int

    def same_as(self, other: "Answer", tol: float = LOGPROB_TOL) -> bool:
        mine, theirs = dict(self.top5), dict(other.top5)
        return mine.keys() == theirs.keys() and all(math.isclose(mine[k], theirs[k], abs_tol=tol) for k in mine)


def complete(client, url: str, prompt: str) -> Answer:
    body = {"model": "default", "prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 5}
    r = client.post(f"{url}/v1/completions", json=body)
    if r.status_code != 200:
        raise AssertionError(f"{url}: HTTP {r.status_code}: {r.text[:500]}")
    data = r.json()
    top = data["choices"][0]["logprobs"]["top_logprobs"][0]
    usage = data.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Answer(tuple(sorted(top.items())), int(usage.get("prompt_tokens", 0)), int(cached))


def flush(client, url: str, attempts: int = 600) -> None:
    """``POST /flush_cache`` until the scheduler is idle enough to flush (it refuses with 400 while the last
    request's HiCache write-through or load-back is still in flight, right after its answer)."""
    for _ in range(attempts):
        r = client.post(f"{url}/flush_cache")
        if r.status_code == 200:
            return
        if r.status_code != 400:
            break
        time.sleep(0.1)
    raise AssertionError(f"{url}/flush_cache: HTTP {r.status_code}: {r.text[:300]}")


def metric_sums(text: str) -> dict:
    """``/metrics`` as {sample name: value summed over labels}, plus ``name{label=value}`` for the labels
    that matter here (``outcome``, ``by``, ``cache_source``)."""
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
            for label in ("outcome", "by", "cache_source"):
                if label in s.labels:
                    key = f"{s.name}{{{label}={s.labels[label]}}}"
                    out[key] = out.get(key, 0.0) + s.value
    return out


def ledgers(log: str) -> list:
    """The stand-in's ledgers of the flushes that happened, in log order (a refused flush logs one too)."""
    return [entry for entry in map(json.loads, LEDGER.findall(log)) if entry["flushed"]]


def ledger_problems(entry: dict, start: dict) -> list:
    """What does not add up in one flush ledger against the start (free counts of a fresh server)."""
    bad = []
    before, after = entry["before"], entry["after"]
    for side in ("device", "host"):
        total = [f + h for f, h in zip(before[f"{side}_free"], before[f"{side}_held"])]
        if total != start[f"{side}_free"]:
            bad.append(f"{side}: free + held by the tree before the flush {total} != start {start[f'{side}_free']}")
        if after[f"{side}_free"] != start[f"{side}_free"]:
            bad.append(f"{side}: free after the flush {after[f'{side}_free']} != start {start[f'{side}_free']}")
    return bad
