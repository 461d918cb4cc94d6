"""HiCache on (``--enable-hierarchical-cache``, direct io, layer-first host layout) with the CPU stand-ins:
the overlay server starts, serves repeated-prefix requests through a device pool small enough to spill
to the host tier, and its greedy outputs equal upstream's for the same requests (the owner-lanes patch
must be inert on a pool that is not page-interleaved).

In the scheduler that owns the cache (``sglang-overlay status``), on 0.5.23: the patch's three targets,
``UnifiedRadixCache._load_back_transfers`` and ``_execute_kv_backup`` (host backup) and the allocators'
``evict_to_free_tokens`` (prefill/decode capacity), are hooked and pass through (the pool is not page-interleaved without
``--enable-kv-cache-sharding``), so the outputs equal upstream's."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.support import releases
from tests.support.real_server.configs import OVERLAY_HICACHE, UPSTREAM_HICACHE
from tests.support.real_server.model import GSM8K_TRAIN
from tests.support.real_server.server import run_status

pytestmark = pytest.mark.e2e

CACHED = re.compile(r"#cached-token: (\d+)")


def prompts() -> list[str]:
    """Four ~400-token prefixes (GSM8K train text), each asked with two tails, then the first two again.

    Sizes: the device pool (1,024 tokens) holds two of them, the host pool (2,049) all four, so cycling
    through the four pushes each prefix out of the device before it comes back: its reuse goes through
    the host tier (write-through backup, then load-back through the stand-in copy)."""
    lines = [json.loads(x) for x in GSM8K_TRAIN.read_text().splitlines()[:32]]
    prefixes = [" ".join(r["question"] + " " + r["answer"] for r in lines[i * 8 : (i + 1) * 8]) for i in range(4)]
    rounds = []
    for tail in (" Question: how many?", " Question: how much?"):
        rounds += [p[:1200] + tail for p in prefixes]
    return rounds + rounds[:2]


def run(server) -> list[str]:
    outs = []
    with httpx.Client(timeout=120) as client:
        for prompt in prompts():
            r = client.post(
                f"{server.url}/v1/completions",
                json={"model": "default", "prompt": prompt, "max_tokens": 12, "temperature": 0},
            )
            assert r.status_code == 200, r.text
            outs.append(r.json()["choices"][0]["text"])
    return outs


@pytest.fixture(scope="module")
def outputs(server_pool):
    overlay = server_pool.get(OVERLAY_HICACHE)
    got = {"overlay": run(overlay), "overlay_log": overlay.log_text()}
    upstream = server_pool.get(UPSTREAM_HICACHE)
    got.update(upstream=run(upstream), upstream_log=upstream.log_text())
    return got


def test_overlay_server_has_the_host_tier_and_the_standins_ran(outputs):
    log = outputs["overlay_log"]
    assert "hicache_attached=True" in log
    assert "sglang-cpu-standins: first transfer_kv_direct call" in log
    assert "role=scheduler" in log  # the overlay is in the scheduler that owns the cache


def test_repeated_prefixes_hit_the_cache(outputs):
    hits = [int(n) for n in CACHED.findall(outputs["overlay_log"])]
    assert sum(1 for n in hits if n >= 100) >= 4, hits  # second tails and repeats reuse ~400-token prefixes


def test_repeats_reproduce_their_first_answer(outputs):
    outs = outputs["overlay"]
    assert outs[8:10] == outs[0:2], "a prefix served again (from the cache) changed the greedy output"


def test_greedy_outputs_equal_upstream(outputs):
    assert outputs["overlay"] == outputs["upstream"]


def test_the_scheduler_owning_the_cache_holds_the_pins_owner_lane_hooks(outputs, server_pool):
    server = server_pool.get(OVERLAY_HICACHE)
    result = run_status(server.url, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    schedulers = [p for p in json.loads(result.stdout)["processes"] if p["role"].strip().startswith("scheduler")]
    assert len(schedulers) == 1, schedulers
    scheduler = schedulers[0]
    targets = releases.hooked_targets("cp-hicache-owner-lanes")  # the serving release folder's, from the registry
    applied = sorted(scheduler["applied"].get("cp-hicache-owner-lanes", []))
    # unified/: the server's UnifiedRadixCache imports every target (a new release folder says here what it expects)
    assert releases.per_release("cp-hicache-owner-lanes", {"unified": "every target applied"})
    assert applied == sorted(targets), scheduler
