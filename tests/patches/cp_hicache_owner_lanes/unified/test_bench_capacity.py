"""The capacity-eviction benchmark on the unified release (scripts/bench_capacity.py) at its smallest size:
its counted goals hold and its JSON is the schema's. Never wall time: times and speedups are reported, not
tested.

Collected only where the installed sglang is in unified/'s Release range (tests/conftest.py: release folders). Runs in this
process (one 1k-leaf tree per side, a few seconds): the patch admits exactly as often as upstream,
evicts no page in a unit holding no short lane, at most one short-lane page per deficit page, plans
every call itself (no fallback), and does no tensor op or host sync while planning; upstream's path,
on the same tree, does evict units of lanes that are not short (so the scenario tells them apart).
"""

from __future__ import annotations

import json

from tests.support.owner_lanes_bench import CAPACITY, assert_schema, load_bench, owner_lanes


def test_capacity_bench_smallest_size_counted_goals(tmp_path):
    out = tmp_path / "bench.json"
    load_bench(CAPACITY).main(["--sizes", "1000", "--calls", "6", "--json", str(out)])
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # only where told
    result = json.loads(out.read_text())
    assert_schema(result, owner_lanes("schema").CAPACITY)
    assert result["timed_call"] == "BaseTokenToKVPoolAllocator.evict_to_free_tokens"
    (row,) = result["sizes"].values()
    assert row["leaves"] == 1000 and row["calls"] == 6
    assert row["deficit_pages_patch"] > 0 and row["deficit_pages_upstream"] > 0
    assert row["admission_rate_patch"] == row["admission_rate_upstream"] == 1.0
    assert row["pages_evicted_nonshort_patch"] == 0
    assert row["pages_evicted_per_deficit_page_patch"] <= 1.0
    assert row["capacity_plans_patch"] == 6 and row["capacity_fallbacks_patch"] == 0
    assert row["tensor_ops_planning"] == 0 and row["host_syncs_planning"] == 0
    assert row["pages_evicted_nonshort_upstream"] > 0  # upstream's lane-blind floor, same tree
    assert row["time_per_call_ms_patch"] > 0 and row["time_per_call_ms_upstream"] > 0
