"""scripts/bench_serving_hicache.py without a server: the replay it sends and the re-prefill baseline it counts
against (the servers themselves are the e2e tier's, tests/e2e/test_09_owner_lanes_live.py)."""

from __future__ import annotations

import pytest

from tests.support.scripts import load_script


def load_bench():
    return load_script("bench_serving_hicache")


class CharTokenizer:
    def encode(self, text):
        return [ord(c) for c in text]


def test_the_replay_is_seeded_and_each_turn_extends_the_last():
    bench = load_bench()
    convs = bench.conversations(7, 3, 4)
    assert convs == bench.conversations(7, 3, 4) and convs != bench.conversations(11, 3, 4)
    for conv in convs:
        assert all(later.startswith(earlier) and len(later) > len(earlier) for earlier, later in zip(conv, conv[1:]))
    order = bench.turn_major(convs)
    assert order[:3] == [c[0] for c in convs] and len(order) == 12


def test_already_prefilled_is_the_page_aligned_longest_earlier_prefix():
    bench = load_bench()
    a = "x" * 40
    order = [a, a + "y" * 10, "z" * 40, a + "y" * 30]
    # first: nothing earlier; second: 40 shared -> 32; third: nothing; fourth: 50 shared with the second -> 48
    assert bench.already_prefilled(order, CharTokenizer()) == [0, 32, 0, 48]


@pytest.mark.parametrize("bad", [["--shards", "1"], ["--tokens-per-class", "100"], ["--repeats", "0"]])
def test_bad_arguments_are_refused_before_any_server(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        load_bench().main(bad)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


def _run(**counts):
    base = {m: 0 for m in (*load_bench().MEASURES, *load_bench().EXTRAS)}
    return {**base, "prompt_tokens_per_s": 100.0, "ledger_problems": [], **counts}


def test_deterministic_verdict_is_identical_different_or_not_deterministic():
    bench = load_bench()
    same = {"overlay": [_run(evicted_tokens=64)] * 2, "upstream": [_run(evicted_tokens=64)] * 2}
    assert bench.deterministic_verdict(same) == {"verdict": "identical", "overlay_minus_upstream": {}}
    # a time is reported, never judged: a faster run changes no verdict
    faster = {**same, "overlay": [_run(evicted_tokens=64, prompt_tokens_per_s=999.0)] * 2}
    assert bench.deterministic_verdict(faster)["verdict"] == "identical"
    fewer = {**same, "overlay": [_run(evicted_tokens=32, loadbacks_served=2)] * 2}
    assert bench.deterministic_verdict(fewer) == {
        "verdict": "different (overlay better on every count that differs)",
        "overlay_minus_upstream": {"evicted_tokens": -32, "loadbacks_served": 2},
    }
    worse = {**same, "overlay": [_run(evicted_tokens=96)] * 2}
    assert bench.deterministic_verdict(worse)["verdict"] == "different (overlay worse on every count that differs)"
    mixed = {**same, "overlay": [_run(evicted_tokens=96, loadbacks_served=1)] * 2}
    assert bench.deterministic_verdict(mixed)["verdict"] == "different (mixed)"
    # the patch's own counter has no upstream value: never a difference
    assert (
        bench.deterministic_verdict(
            {**same, "overlay": [_run(evicted_tokens=64, owner_lane_capacity_evictions=9)] * 2}
        )["verdict"]
        == "identical"
    )
    unstable = {**same, "upstream": [_run(evicted_tokens=64), _run(evicted_tokens=96)]}
    verdict = bench.deterministic_verdict(unstable)
    assert verdict["verdict"] == "not deterministic" and verdict["unstable"] == {
        "overlay": [],
        "upstream": ["evicted_tokens"],
    }


def test_concurrent_verdict_judges_throughput_against_the_aa_band_and_never_the_counts():
    bench = load_bench()
    tps = lambda *v: [_run(prompt_tokens_per_s=x, cached_tokens=c) for x, c in zip(v, (0, 500, 90))]  # noqa: E731
    # overlay/upstream 0.98, 1.0, 0.99 (median 0.99); the overlay against itself 1.02, 0.99: band 0.98-1.02,
    # inside, while cached tokens swing from 0 to 500 on both sides (not judged)
    v = bench.concurrent_verdict({"overlay": tps(98, 100, 99), "upstream": tps(100, 100, 100)})
    t = v["prompt_tokens_per_s"]
    assert t["verdict"] == "inside the A/A band" and t["ab_median"] == 0.99
    assert set(v) == {"prompt_tokens_per_s", "cache_counts"} and "not judged" in v["cache_counts"]
    # a steady side pair, the overlay 20% slower every repeat: outside, against the overlay
    v = bench.concurrent_verdict({"overlay": tps(80, 80, 80), "upstream": tps(100, 101, 100)})
    assert v["prompt_tokens_per_s"]["verdict"].endswith("(overlay worse)")
    assert v["prompt_tokens_per_s"]["verdict"].startswith("outside it by")


def test_deterministic_mode_runs_one_request_at_a_time_and_each_side_twice(monkeypatch):
    bench = load_bench()
    seen = {}
    monkeypatch.setattr(bench, "require_sglang", lambda *a: None)
    monkeypatch.setattr(bench, "bench", lambda args: seen.update(vars(args)) or {"config": {}, "cells": []})
    assert bench.main(["--concurrency", "8"]) == 0
    assert (seen["mode"], seen["concurrency"], seen["repeats"]) == ("deterministic", 1, 2)
    assert bench.main(["--mode", "concurrent"]) == 0 and (seen["concurrency"], seen["repeats"]) == (4, 3)
    with pytest.raises(SystemExit):
        bench.main(["--repeats", "1"])  # the deterministic mode's own check needs two runs per side
