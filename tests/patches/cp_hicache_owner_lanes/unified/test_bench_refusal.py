"""scripts/bench_owner_lanes.py drives the HiRadixCache release's classes: on this release it refuses,
naming the benchmark to run instead (scripts/bench_owner_lanes_0523.py), with no traceback and nothing written."""

from __future__ import annotations

from tests.support.owner_lanes_bench import run_bench


def test_bench_refuses_another_pin_naming_what_to_run(tmp_path):
    proc = run_bench(tmp_path, "--quick", "--json", str(tmp_path / "x.json"), timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "drives sglang<0.5.23's classes" in proc.stderr and "bench_owner_lanes_0523.py" in proc.stderr
    assert list(tmp_path.iterdir()) == []
