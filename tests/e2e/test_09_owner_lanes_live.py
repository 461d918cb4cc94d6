"""cp-hicache-owner-lanes serving requests: a real 0.5.23 CPU server on upstream's page-interleaved allocator
(4 owner classes) and host pool, overlay against upstream, through ``/v1/completions``.

STAND-IN: one rank builds upstream's ``PageInterleavePoolAllocator`` and ``PageInterleaveHostPool`` through the
test-only ``page_interleave`` override of the CPU stand-ins plugin (``tests/support/real_server/owner_lanes.py``);
striping across ranks, the PyNccl gather, scratch admission and the disaggregation send filter are not exercised.
Like the PD prefill workers that run this allocator upstream, the servers prefill and hand off: ``max_tokens=1``.

Sequence (the same on both sides): a flush (the free counts of a fresh pool), six ~256-320-token prefixes
asked three times each, one at a time (the device pool, 4 x 256 tokens, holds three: each repeat's prefix
comes back from the host tier), a flush, the six prompts again cold, a flush.
``SGLANG_OVERLAY_E2E_DISABLE_ON_OVERLAY=cp-hicache-owner-lanes`` launches the overlay side with that patch
disabled: ``test_the_patch_acts_in_the_server`` then fails (how the patch's effect was shown).
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from tests.support import releases
from tests.support.real_server.model import GSM8K_TRAIN
from tests.support.real_server.owner_lanes import (
    CACHED,
    complete,
    flush,
    interleaved_config,
    ledger_problems,
    ledgers,
    metric_sums,
)

pytestmark = [
    pytest.mark.e2e,
    releases.only_where_served_by(
        "cp-hicache-owner-lanes", "unified", "the page-interleaved allocator of this stand-in is unified/'s upstream"
    ),
]
ROUNDS = 3
OVERLAY = interleaved_config(overlay=True, disable=os.environ.get("SGLANG_OVERLAY_E2E_DISABLE_ON_OVERLAY", ""))
UPSTREAM = interleaved_config(overlay=False)
LANES = "sglang:cp_owner_lane_"


def prompts() -> list[str]:
    """Six prefixes of 900 characters of GSM8K train text (about 260-330 tokens of the tiny model's BPE)."""
    rows = [json.loads(x) for x in GSM8K_TRAIN.read_text().splitlines()[:30]]
    return [" ".join(r["question"] + " " + r["answer"] for r in rows[i * 5 : (i + 1) * 5])[:900] for i in range(6)]


def replay(server) -> dict:
    with httpx.Client(timeout=300) as client:
        flush(client, server.url)
        warm = [[complete(client, server.url, p) for p in prompts()] for _ in range(ROUNDS)]
        flush(client, server.url)
        cold = [complete(client, server.url, p) for p in prompts()]
        flush(client, server.url)
        metrics = metric_sums(client.get(f"{server.url}/metrics").text)
    return {"warm": warm, "cold": cold, "metrics": metrics, "log": server.log_text()}


class Runs(dict):
    """Each side's replay, run on first use (a test that needs one side launches only that server)."""

    def __init__(self, pool):
        super().__init__()
        self.pool = pool

    def __missing__(self, side):
        self[side] = replay(self.pool.get(OVERLAY if side == "overlay" else UPSTREAM))
        return self[side]


@pytest.fixture(scope="module")
def runs(server_pool):
    return Runs(server_pool)


def test_the_patch_acts_in_the_server(runs):
    m = runs["overlay"]["metrics"]
    assert m.get(f"{LANES}load_backs_total{{outcome=loaded}}", 0) > 0, {k: v for k, v in m.items() if LANES in k}
    assert m.get(f"{LANES}capacity_evictions_total{{by=owner_lanes}}", 0) > 0, m
    assert m.get(f"{LANES}evicted_pages_total", 0) > 0, m


def test_upstream_has_no_owner_lane_series(runs):
    assert not any(LANES in k for k in runs["upstream"]["metrics"])


@pytest.mark.parametrize("side", ["overlay", "upstream"])
def test_repeats_come_back_from_the_host_tier(runs, side):
    run = runs[side]
    for again in run["warm"][1:]:
        for answer in again:
            assert answer.cached_tokens >= 256, [a.cached_tokens for a in again]
    assert all(a.cached_tokens == 0 for a in run["cold"]), "a cold run after a flush found something cached"
    assert run["metrics"].get("sglang:cached_tokens_total{cache_source=host}", 0) > 0
    assert sum(1 for n in CACHED.findall(run["log"]) if int(n) >= 256) >= 6  # the scheduler's own prefill lines


def test_top5_logprobs_equal_overlay_upstream_and_a_cold_run(runs):
    cold = runs["overlay"]["cold"]
    assert all(a.same_as(b) for a, b in zip(cold, runs["upstream"]["cold"])), "cold runs differ between sides"
    for side in ("overlay", "upstream"):
        for rnd, answers in enumerate(runs[side]["warm"]):
            bad = [i for i, (a, c) in enumerate(zip(answers, cold)) if not a.same_as(c)]
            assert not bad, f"{side} round {rnd}: prompts {bad} differ from their cold run"


@pytest.mark.parametrize("side", ["overlay", "upstream"])
def test_no_page_leaks_on_either_side(runs, side):
    found = ledgers(runs[side]["log"])
    assert len(found) >= 3, "the stand-in's flush ledger is missing (is the stand-in active?)"
    start = found[-3]["before"]  # the flush of this replay's start, on a pool nothing holds
    assert start["device_held"] == [0] * len(start["device_held"]), start
    for entry in found[-3:]:
        assert not ledger_problems(entry, start), ledger_problems(entry, start)
    assert found[-3]["after"]["device_free"] == start["device_free"]
    assert any(h > 0 for h in found[-2]["before"]["host_held"]), "the replay never used the host pool"


def _standin():
    import importlib.util

    from tests.support.real_server.server import STANDINS

    path = STANDINS / "sglang_cpu_standins" / "page_interleave.py"
    spec = importlib.util.spec_from_file_location("_standin_page_interleave", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_standin_is_opt_in_and_refuses_a_bad_setting(monkeypatch):
    pi = _standin()
    monkeypatch.delenv(pi.SETTING, raising=False)
    assert pi.shard_size() == 0
    for bad in ("1", "four", "-4"):
        monkeypatch.setenv(pi.SETTING, bad)
        with pytest.raises(ValueError, match=pi.SETTING):
            pi.shard_size()


def test_the_standins_overrides_are_fingerprinted(monkeypatch):
    pi = _standin()
    pi.check_fingerprints()  # the installed 0.5.23 is what the overrides were written against
    key = next(iter(pi.FINGERPRINTS))
    monkeypatch.setitem(pi.FINGERPRINTS, key, "sha256:" + "0" * 64)
    with pytest.raises(pi.StandinDrift, match=key[1]):
        pi.check_fingerprints()
