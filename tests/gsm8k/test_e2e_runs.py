"""The GSM8K runner end to end on a scripted server that keeps to its plan: completions, chat and streamed runs,
baseline gating and its exit codes, and the full 1,319 questions.

Real HTTP against the installed upstream's OpenAI completions/chat handlers (tests/support/scripted_server.py,
overlay applied through the plugin path) with a scripted answerer (tests/support/gsm8k_script.py) that answers a
known set of questions wrongly, with no number, slowly, or by aborting with an int status code (the plan:
``e2e_plan.py``).
Invariant: the runner's reported numbers equal the scripted ones. Cost: one scripted server in a fresh process
for the module (``ci_slow``), on the committed fixture (60 test questions); only the full 1,319 run (``slow``)
needs the full splits and a server of its own.
"""

import json

import pytest

from tests.gsm8k.e2e_plan import N, check_against_plan, expected, serve_plan
from tests.gsm8k.full_splits import needs_full_gsm8k
from tests.support.env import GSM8K_DIR, full_gsm8k_dir
from tests.support.gsm8k_cli import load_run, run_cli

pytestmark = pytest.mark.ci_slow  # scripted OpenAI servers in fresh processes


@pytest.fixture(scope="module")
def server():
    with serve_plan(GSM8K_DIR) as handle:
        yield handle


def test_completions_run_reports_exactly_the_scripted_outcome(server, capsys, tmp_path):
    before = server.stats()["requests"]
    code, last = run_cli(capsys, tmp_path, "--base-url", server.base_url, "--num-questions", N, "--parallel", 32)
    summary, records = load_run(tmp_path)
    by_id = check_against_plan(summary, records, N)
    assert code == 0 and last.startswith("PASS")
    assert summary["config"]["model"] == "scripted-model"  # discovered through /v1/models
    assert summary["config"]["data_source"] == "fixture" and "data fixture" in (tmp_path / "report.md").read_text()
    assert server.stats()["requests"] - before == expected(N)["attempts"]  # retries happened exactly where scripted
    ok = by_id[0]
    gold_words = len(ok["output"].split())
    assert ok["completion_tokens"] == gold_words and ok["prompt_tokens"] > 0  # usage came through upstream
    assert by_id[9]["error_message"] and "scripted abort of question 9" in by_id[9]["error_message"]
    assert {p.name for p in tmp_path.iterdir()} >= {
        "results.jsonl",
        "summary.json",
        "report.md",
        "accuracy.png",
        "latency.png",
    }
    assert summary["latency_p50_s"] is not None and summary["wall_s"] > 0
    server.wait_idle()


def test_baseline_gating_exit_codes(server, capsys, tmp_path):
    args = ("--base-url", server.base_url, "--num-questions", N, "--parallel", 32)
    code, _ = run_cli(capsys, tmp_path / "base", *args)
    assert code == 0
    baseline = tmp_path / "base" / "summary.json"
    code, last = run_cli(capsys, None, *args, "--baseline", baseline)
    assert code == 0 and last.startswith("PASS") and "within 0.020 of baseline" in last

    acc = expected(N)["correct"] / N
    better = tmp_path / "better.json"
    better.write_text(json.dumps({**json.loads(baseline.read_text()), "accuracy": acc + 0.03}))
    code, last = run_cli(capsys, None, *args, "--baseline", better)
    assert code == 1 and last.startswith("FAIL") and "baseline" in last
    code, last = run_cli(capsys, None, *args, "--baseline", better, "--tolerance", 0.05)
    assert code == 0

    code, last = run_cli(capsys, None, *args, "--min-accuracy", round(acc + 0.01, 3))
    assert code == 1 and "--min-accuracy" in last
    code, last = run_cli(capsys, None, *args, "--min-accuracy", round(acc - 0.01, 3))
    assert code == 0
    # 2 failed of 60 is more than 1%: the run is incomplete, whatever the accuracy
    code, last = run_cli(capsys, None, *args, "--max-error-rate", 0.01, "--min-accuracy", 0.0)
    assert code == 2 and last.startswith("INCOMPLETE")
    server.wait_idle()


def test_chat_mode_run(server, capsys, tmp_path):
    n = 48
    code, last = run_cli(
        capsys,
        tmp_path,
        "--base-url",
        server.base_url + "/v1",
        "--mode",
        "chat",
        "--num-questions",
        n,
        "--parallel",
        32,
    )
    summary, records = load_run(tmp_path)
    check_against_plan(summary, records, n)
    assert code == 0 and summary["config"]["mode"] == "chat"
    server.wait_idle()


def test_streamed_run_with_int_abort_codes(server, capsys, tmp_path):
    """Streamed int-code aborts become error chunks (and so retries) only with the abort-status patch."""
    code, last = run_cli(
        capsys, tmp_path, "--base-url", server.base_url, "--stream", "--num-questions", N, "--parallel", 32
    )
    summary, records = load_run(tmp_path)
    check_against_plan(summary, records, N)
    assert code == 0
    assert all(r["ttft_s"] is not None for r in records if r["error"] is None)
    server.wait_idle()


@pytest.mark.slow
@needs_full_gsm8k("runs all 1,319 test questions at --parallel 64 (the fixture has 60)")
def test_full_1319_at_parallel_64_is_exact(capsys, tmp_path):
    """The full test split, as the benchmark runs it (scripts/bench_gsm8k_runner.py times it); the plan's
    question ids are the fixture's, which are the first 60 of the full split."""
    full = full_gsm8k_dir()
    with serve_plan(full) as full_server:
        code, last = run_cli(capsys, tmp_path, "--base-url", full_server.base_url, "--parallel", 64, data_dir=full)
        summary, records = load_run(tmp_path)
        check_against_plan(summary, records, 1319)
        assert code == 0 and summary["requests_per_s"] > 0 and summary["config"]["data_source"] == "published"
        full_server.wait_idle()
