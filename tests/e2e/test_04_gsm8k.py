"""The GSM8K runner through a real patched server: the pipeline end to end (random weights: accuracy is
not the point, ``--min-accuracy 0``), exit 0, and ``summary.json`` agrees with ``results.jsonl``."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.conftest import OVERLAY_PLAIN
from tests.support.real_server.model import REPO
from tests.support.real_server.server import VENV_BIN

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_gsm8k_runner_against_the_real_server(server_pool, tmp_path, mode):
    server = server_pool.get(OVERLAY_PLAIN)
    out = tmp_path / mode
    cmd = [str(VENV_BIN / "sglang-overlay"), "gsm8k", "--base-url", server.url, "--data-dir",
           str(REPO / "tests" / "data" / "gsm8k"), "--num-questions", "10", "--output", str(out),
           "--min-accuracy", "0", "--max-tokens", "48", "--parallel", "2", "--mode", mode,
           "--no-download", "--no-progress"]
    if mode == "chat":
        cmd.append("--stream")
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    assert len(records) == summary["num_questions"] == 10
    assert summary["correct"] == sum(bool(r["correct"]) for r in records)
    assert summary["error_count"] == sum(r["error"] is not None for r in records) == 0
    assert summary["invalid_count"] == sum(r["extracted_by"] == "invalid" for r in records)
    assert summary["output_tokens"] == sum(r["completion_tokens"] or 0 for r in records) > 0
    assert all(r["completion_tokens"] and r["completion_tokens"] <= 48 for r in records)
    assert sorted(r["id"] for r in records) == list(range(10))
