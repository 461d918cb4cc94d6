"""The 0.5.23 capacity-eviction benchmark (scripts/bench_capacity_0523.py) at its smallest size:
its counted goals hold. Never wall time: times and speedups are reported, not tested.

Collected only where the installed sglang is in unified/'s Release range (tests/conftest.py: release folders). Runs in this
process (one 1k-leaf tree per side, a few seconds): the patch admits exactly as often as upstream,
evicts no page in a unit holding no short lane, at most one short-lane page per deficit page, plans
every call itself (no fallback), and does no tensor op or host sync while planning; upstream's path,
on the same tree, does evict units of lanes that are not short (so the scenario tells them apart).
"""

from __future__ import annotations

import importlib.util
import json
import sys

from tests.conftest import REPO


def load_bench():
    sys.path.insert(0, str(REPO / "scripts"))  # the bench imports its sibling bench_owner_lanes_0523
    spec = importlib.util.spec_from_file_location("bench_capacity_0523", REPO / "scripts" / "bench_capacity_0523.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_capacity_bench_smallest_size_counted_goals(tmp_path):
    out = tmp_path / "bench.json"
    load_bench().main(["--sizes", "1000", "--calls", "6", "--json", str(out)])
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # only where told
    (row,) = json.loads(out.read_text())["sizes"].values()
    assert row["leaves"] == 1000 and row["calls"] == 6
    assert row["deficit_pages_patch"] > 0 and row["deficit_pages_upstream"] > 0
    assert row["admission_rate_patch"] == row["admission_rate_upstream"] == 1.0
    assert row["pages_evicted_nonshort_patch"] == 0
    assert row["pages_evicted_per_page_needed_short_patch"] <= 1.0
    assert row["patch"]["capacity_plans"] == 6 and row["patch"]["capacity_fallbacks"] == 0
    assert row["tensor_ops_planning"] == 0 and row["host_syncs_planning"] == 0
    assert row["pages_evicted_nonshort_upstream"] > 0  # upstream's lane-blind floor, same tree
    assert row["time_ms_median_patch"] > 0 and row["time_ms_median_upstream"] > 0
