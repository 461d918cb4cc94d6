"""The owner-lane load-back benchmark on the unified release (scripts/bench_owner_lanes.py) at its smallest
size: its counted goals hold and its JSON is the schema's. Never wall time: times and speedups are reported,
not tested.

Collected only where the installed sglang is in unified/'s Release range (tests/conftest.py: release folders). Runs
in this process (one 1k-leaf tree per side, a few seconds): every coverable load-back served, no page evicted
in a unit that holds no short lane, short-lane pages evicted at most one per page of deficit, nothing evicted
for a load with no deficit, zero tensor ops and host syncs while planning; and upstream's path, on the same
tree, does evict for lanes that are not short (so the scenario tells the two apart).
"""

from __future__ import annotations

import json

from tests.support.owner_lanes_bench import assert_schema, load_bench, owner_lanes


def test_bench_smallest_size_counted_goals(tmp_path):
    out = tmp_path / "bench.json"
    load_bench().main(["--sizes", "1000", "--loads", "6", "--json", str(out)])
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # only where told
    result = json.loads(out.read_text())
    assert_schema(result, owner_lanes("schema").LOAD_BACK)
    assert result["release"] == "unified" and result["timed_call"] == "UnifiedRadixCache._load_back_transfers"
    (row,) = result["sizes"].values()
    assert row["leaves"] == 1000
    assert row["coverable_loads_patch"] == row["loads"] == 6
    assert row["deficit_pages_patch"] > 0  # some loads do need eviction on a short lane
    assert row["success_rate_patch"] == 1.0
    assert row["pages_evicted_nonshort_patch"] == 0
    assert row["pages_evicted_per_deficit_page_patch"] <= 1.0
    assert row["loads_without_deficit_patch"] > 0 and row["pages_evicted_on_loads_without_deficit_patch"] == 0
    assert row["tensor_ops_planning"] == 0 and row["host_syncs_planning"] == 0
    assert row["pages_evicted_nonshort_upstream"] > 0  # upstream's lane-blind gate, same tree
    assert row["time_per_call_ms_patch"] > 0 and row["time_per_call_ms_upstream"] > 0
    assert row["planning_ms_patch"] > 0 and "planning_ms_patch" not in row["not_measured"]  # timed by the adapter
