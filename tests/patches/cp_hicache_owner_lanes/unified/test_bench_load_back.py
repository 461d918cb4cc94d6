"""The 0.5.23 owner-lane benchmark (scripts/bench_owner_lanes_0523.py) at its smallest size:
its counted goals hold. Never wall time: times and speedups are reported, not tested.

Collected only where the installed sglang is in unified/'s Release range (tests/conftest.py: release folders). Runs
in this process (one 1k-leaf tree per side, a few seconds): every coverable load-back
served, no page evicted in a unit that holds no short lane, short-lane pages evicted at
most one per page of deficit, nothing evicted for a load with no deficit, zero tensor
ops and host syncs while planning; and upstream's path, on the same tree, does evict
for lanes that are not short (so the scenario tells the two apart).
"""

from __future__ import annotations

import importlib.util
import json

from tests.conftest import REPO

KEYS = (
    "success_rate_patch",
    "success_rate_upstream",
    "pages_evicted_per_page_needed_short_patch",
    "pages_evicted_per_page_needed_short_upstream",
    "pages_evicted_nonshort_patch",
    "pages_evicted_nonshort_upstream",
    "time_ms_patch",
    "time_ms_upstream",
    "speedup_end_to_end",
    "tensor_ops_planning",
    "leaves",
)


def load_bench():
    spec = importlib.util.spec_from_file_location(
        "bench_owner_lanes_0523", REPO / "scripts" / "bench_owner_lanes_0523.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_smallest_size_counted_goals(tmp_path):
    bench = load_bench()
    out = tmp_path / "bench.json"
    bench.main(["--sizes", "1000", "--loads", "6", "--json", str(out)])
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # only where told
    (row,) = json.loads(out.read_text())["sizes"].values()
    for key in KEYS:
        assert key in row, key
    assert row["leaves"] == 1000
    assert row["coverable_loads"] == row["loads"] > 0
    assert row["deficit_pages_patch"] > 0  # some loads do need eviction on a short lane
    assert row["success_rate_patch"] == 1.0
    assert row["pages_evicted_nonshort_patch"] == 0
    assert row["pages_evicted_per_page_needed_short_patch"] <= 1.0
    assert row["loads_without_deficit"] > 0 and row["pages_evicted_on_loads_without_deficit_patch"] == 0
    assert row["tensor_ops_planning"] == 0 and row["host_syncs_planning"] == 0
    assert row["pages_evicted_nonshort_upstream"] > 0  # upstream's lane-blind gate, same tree
    assert row["time_ms_patch"] > 0 and row["time_ms_upstream"] > 0
