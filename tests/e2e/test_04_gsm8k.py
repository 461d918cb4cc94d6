"""The GSM8K runner through a real patched server: the pipeline end to end (random weights: accuracy is
not the point, ``--min-accuracy 0``), exit 0, and ``summary.json`` agrees with ``results.jsonl``; then the
paired A/B verdict of the patched server against a pristine upstream server (same tiny model, greedy): the
patch set changes no answer (``--max-flips 0``), and the same verdict fails where answers do differ
(sampling at temperature 1 without a seed). Both A/B tests are the slow tier: on every push the A/B runs
on real text in ``test_10_real_model.py``, the same runner and verdict on SmolLM2.

The A/B runs one request at a time per server (``--parallel 1``): on random weights the logits are nearly
tied, so a different batch composition on the two servers could move an argmax by rounding alone."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.real_server.configs import OVERLAY_PLAIN, UPSTREAM_PLAIN
from tests.support.real_server.model import REPO
from tests.support.real_server.server import VENV_BIN

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_gsm8k_runner_against_the_real_server(server_pool, tmp_path, mode):
    server = server_pool.get(OVERLAY_PLAIN)
    out = tmp_path / mode
    cmd = [
        str(VENV_BIN / "sglang-overlay"),
        "gsm8k",
        "--base-url",
        server.url,
        "--data-dir",
        str(REPO / "tests" / "data" / "gsm8k"),
        "--num-questions",
        "10",
        "--output",
        str(out),
        "--min-accuracy",
        "0",
        "--max-tokens",
        "48",
        "--parallel",
        "2",
        "--mode",
        mode,
        "--no-download",
        "--no-progress",
    ]
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


def _ab(server_pool, out, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    upstream, overlay = server_pool.get(UPSTREAM_PLAIN), server_pool.get(OVERLAY_PLAIN)
    cmd = [
        str(VENV_BIN / "sglang-overlay"),
        "gsm8k",
        "--base-url",
        upstream.url,
        "--against",
        overlay.url,
        "--data-dir",
        str(REPO / "tests" / "data" / "gsm8k"),
        "--num-questions",
        "20",
        "--max-tokens",
        "48",
        "--parallel",
        "1",
        "--max-flips",
        "0",
        "--output",
        str(out),
        "--no-download",
        "--no-progress",
        *extra,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    return result, summary


@pytest.mark.slow  # the same claim on every push is test_10's, on real text (SmolLM2): 104 s here compares noise
def test_ab_the_patched_server_changes_no_answer_of_pristine_upstream(server_pool, tmp_path):
    result, summary = _ab(server_pool, tmp_path / "greedy")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    p = summary["paired"]
    assert p["n"] == 20 and p["excluded"] == 0 and p["changed"] == [] and p["flipped"] == []
    assert p["same_answer"] == 20 and p["agreement"] == 1.0 and p["mcnemar_p"] == 1.0
    a = [json.loads(x) for x in (tmp_path / "greedy" / "results.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "greedy" / "results_b.jsonl").read_text().splitlines()]
    assert [r["output"] for r in a] == [r["output"] for r in b]  # not only the answers: the very texts
    assert summary["b"]["config"]["base_url"] != summary["config"]["base_url"]


@pytest.mark.slow  # the verdict's logic is tests/gsm8k/test_paired.py's (scripted servers, exact counts); 2 min here
def test_ab_the_verdict_fails_where_answers_differ(server_pool, tmp_path):
    result, summary = _ab(server_pool, tmp_path / "sampled", "--temperature", "1.0")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "more than --max-flips 0" in result.stdout.strip().splitlines()[-1]
    assert len(summary["paired"]["changed"]) > 0 and summary["verdict"]["exit_code"] == 1
