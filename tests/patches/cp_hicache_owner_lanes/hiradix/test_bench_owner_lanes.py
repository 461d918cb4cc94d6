"""The owner-lane benchmark on the hiradix release runs end to end and its counted goals hold; the capacity
benchmark says it has nothing to measure here.

``ci_slow`` (CI's reduced slow tier, about a minute): ``--quick`` with every COUNTED goal asserted: zero tensor
ops and host syncs while planning, every coverable load-back served, no redundant unit evicted, the planner's
stated bound held, whole-path figures present on both sides, the JSON in the one schema of every pin, and
nothing written but the files asked for. Never wall time: speedups are reported, not tested.
"""

from __future__ import annotations

import json

import pytest

from tests.support.owner_lanes_bench import CAPACITY, assert_schema, owner_lanes, run_bench


def assert_counted_goals(result, sizes):
    assert_schema(result, owner_lanes("schema").LOAD_BACK)
    assert result["release"] == "hiradix" and result["timed_call"] == "HiRadixCache.load_back"
    rows = list(result["sizes"].values())
    assert [r["leaves"] >= size for r, size in zip(rows, sizes)] == [True] * len(sizes)
    for r in rows:
        assert r["tensor_ops_planning"] == 0 and r["host_syncs_planning"] == 0
        assert r["coverable_loads_patch"] > 0 and r["success_rate_patch"] == 1.0
        assert r["loaded_upstream"] < r["loads"]  # upstream's evict(num_tokens) + retry fails some
        assert r["pages_evicted_on_loads_without_deficit_patch"] == 0
        assert r["time_per_call_ms_patch"] > 0 and r["time_per_call_ms_upstream"] > 0
        assert r["host_syncs_per_load_patch"] is not None and r["planning_ms_patch"] > 0
        assert r["index_build_ms_patch"] is None and "index_build_ms_patch" in r["not_measured"]
        detail = r["release_detail"]
        assert detail["redundant_leaves_max"] == 0 and detail["plan_bound_violations"] == 0
        # a load needs whole units: at most the largest unit (a 3-page leaf here, or a
        # chain) per page of deficit; per page loaded it stays at a couple of pages
        assert 0 < detail["amplification_max"] <= 4.0
    replay = result["release_detail"]["replay"]
    assert replay["patch"]["load_back_success_rate"] == 1.0
    assert replay["patch"]["tokens_reprefilled_after_refusal"] == 0


@pytest.mark.ci_slow
def test_bench_owner_lanes_quick_counted_goals(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = run_bench(tmp_path, "--quick", "--json", str(out / "bench.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["bench.json", "out"]  # only where told
    assert_counted_goals(json.loads((out / "bench.json").read_text()), (1_000, 10_000))
    assert "whole path, patch vs upstream" in proc.stdout


@pytest.mark.slow
def test_bench_owner_lanes_full(tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    proc = run_bench(tmp_path, "--json", str(out), "--png", str(png), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_counted_goals(json.loads(out.read_text()), (1_000, 10_000, 100_000))
    assert png.stat().st_size > 0


def test_capacity_bench_has_nothing_to_measure_on_this_release(tmp_path):
    """This release hooks no capacity eviction: exit 3, one clear line naming what it does hook, nothing written."""
    proc = run_bench(tmp_path, "--quick", "--json", str(tmp_path / "cap.json"), timeout=120, script=CAPACITY)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "nothing to measure on sglang 0.5." in proc.stderr and "hooks no capacity eviction" in proc.stderr
    assert "HiRadixCache.load_back" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
