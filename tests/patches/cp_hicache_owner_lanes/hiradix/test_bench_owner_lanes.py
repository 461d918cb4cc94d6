"""The owner-lane benchmark runs end to end and its counted goals hold.

``ci_slow`` (CI's reduced slow tier, about a minute): ``--quick`` with every COUNTED goal
asserted: zero tensor ops and host syncs while planning, every coverable load-back served,
no redundant unit evicted, the planner's stated bound held, whole-path figures present, and
nothing written but the files asked for. Never wall time: speedups are reported, not tested.
"""

from __future__ import annotations

import json

import pytest

from tests.support.owner_lanes_bench import run_bench

KEYS = (
    "speedup_end_to_end_10k",
    "speedup_end_to_end_100k",
    "speedup_vs_tensor_10k",
    "speedup_vs_upstream_evict_100k",
    "success_rate",
    "success_rate_on_coverable",
    "upstream_success_rate",
    "amplification_max",
    "tensor_ops_during_planning",
    "host_syncs_during_planning",
    "host_syncs_end_to_end_per_load",
)


def assert_counted_goals(result):
    for key in KEYS:
        assert key in result, key
    assert result["tensor_ops_during_planning"] == 0
    assert result["host_syncs_during_planning"] == 0
    assert result["coverable_loads"] > 0
    assert result["success_rate_on_coverable"] == 1.0
    assert result["redundant_leaves_max"] == 0
    assert result["plan_bound_violations"] == 0
    # a load needs whole units: at most the largest unit (a 3-page leaf here, or a
    # chain) per page of deficit; per page loaded it stays at a couple of pages
    assert 0 < result["amplification_max"] <= 4.0
    assert [r["leaves"] >= size for r, size in zip(result["sizes"], (1_000, 10_000, 100_000))] == [True] * 3
    for r in result["sizes"]:
        assert r["end_to_end_ms_median"] > 0 and r["upstream_end_to_end_ms_median"] > 0
    assert result["replay"]["patch"]["load_back_success_rate"] == 1.0
    assert result["replay"]["patch"]["tokens_reprefilled_after_refusal"] == 0


@pytest.mark.ci_slow
def test_bench_owner_lanes_quick_counted_goals(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = run_bench(tmp_path, "--quick", "--json", str(out / "bench.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["bench.json", "out"]  # only where told
    assert_counted_goals(json.loads((out / "bench.json").read_text()))
    assert "whole path, patch vs upstream" in proc.stdout


@pytest.mark.slow
def test_bench_owner_lanes_full(tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    proc = run_bench(tmp_path, "--json", str(out), "--png", str(png), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_counted_goals(json.loads(out.read_text()))
    assert png.stat().st_size > 0
