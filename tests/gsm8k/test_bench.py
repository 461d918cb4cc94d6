"""scripts/bench_gsm8k_runner.py --quick (the ci_slow tier): the committed fixture end to end through the
scripted upstream server, exact, with files only where told. The goal rate is the benchmark's to report;
this test asserts counts only (never wall time)."""

import json
import subprocess
import sys

import pytest

from tests.support.env import GSM8K_DIR, REPO, subprocess_env


@pytest.mark.ci_slow
def test_quick_benchmark_is_exact_and_writes_only_where_told(tmp_path):
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_gsm8k_runner.py"),
            "--quick",
            "--json",
            str(out / "bench.json"),
            "--png",
            str(out / "bench.png"),
        ],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]  # 1: goal rate missed only
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "bench.png"] and not any(cwd.iterdir())
    result = json.loads((out / "bench.json").read_text())
    assert result["quick"] and result["data_dir"] == str(GSM8K_DIR)
    [run] = result["runs"]
    assert (run["mode"], run["num_questions"], run["errors"], run["invalid"], run["accuracy"]) == (
        "completions",
        60,
        0,
        0,
        1.0,
    )
    assert run["exact"] and run["goal_met"] == (run["requests_per_s"] >= result["goal_requests_per_s"])
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
