"""The owner-lane benchmarks write one JSON schema on every pin (``scripts/owner_lanes/schema.py``).

Default tier: a row is built only through the schema, which refuses a missing key, a key it lacks, and a
figure both measured and said not measured. ``ci_slow``: the load-back benchmark, run as a user runs it on the
installed pin at its smallest size, writes exactly the schema's top-level and per-size keys, each null figure
with its reason. Counts only, never wall time.
"""

from __future__ import annotations

import json

import pytest

from tests.support.owner_lanes_bench import assert_schema, owner_lanes, run_bench


def full_row(schema):
    return {k: 0 for k in schema.size if k not in ("not_measured", "release_detail")}


@pytest.mark.parametrize("name", ["LOAD_BACK", "CAPACITY"])
def test_rows_are_built_only_through_the_schema(name):
    s = owner_lanes("schema")
    schema = getattr(s, name)
    figures = full_row(schema)
    row = s.size_row(schema, figures, {}, {})
    assert list(row) == list(schema.size)
    del figures["leaves"]
    with pytest.raises(ValueError, match="keys missing from the schema's \\['leaves'\\]"):
        s.size_row(schema, figures, {}, {})
    assert list(s.size_row(schema, figures, {"leaves": "why"}, {})) == list(schema.size)  # null, with its reason
    with pytest.raises(ValueError, match="keys the schema lacks \\['extra'\\]"):
        s.size_row(schema, {**full_row(schema), "extra": 1}, {}, {})
    with pytest.raises(ValueError, match="measured and also said not measured"):
        s.size_row(schema, {**full_row(schema), "leaves": 5}, {"leaves": "why"}, {})


def test_both_benchmarks_share_the_top_level_keys():
    s = owner_lanes("schema")
    assert s.LOAD_BACK.top[: len(s._TOP)] == s.CAPACITY.top[: len(s._TOP)] == s._TOP
    assert set(s.LOAD_BACK.sided) & set(s.CAPACITY.sided) >= {"pages_evicted_per_deficit_page", "time_per_call_ms"}


@pytest.mark.ci_slow
def test_load_back_json_is_the_schema_on_this_pin(tmp_path):
    out = tmp_path / "bench.json"
    proc = run_bench(tmp_path, "--quick", "--sizes", "1000", "--loads", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert_schema(result, owner_lanes("schema").LOAD_BACK)
    _, release = owner_lanes().installed_release()
    assert result["release"] == release.folder and list(result["sizes"]) == ["1000"]
    (row,) = result["sizes"].values()
    assert row["loads"] == 2 and row["tensor_ops_planning"] == 0 and row["success_rate_patch"] == 1.0
