"""The GSM8K runner end to end: real HTTP against the installed upstream's OpenAI completions/chat handlers
(tests/support/scripted_server.py, overlay applied through the plugin path) with a scripted answerer
(tests/support/gsm8k_script.py) that answers a known set of questions wrongly, with no number, slowly,
or by aborting with an int status code. The runner's reported numbers must equal the scripted ones.
Everything runs on the committed fixture (60 test questions); only the full 1,319 run needs the full splits."""

import json
import threading
import time

import pytest

from sglang_overlay_gsm8k.cli import main
from tests.gsm8k.full_splits import needs_full_gsm8k
from tests.support.env import GSM8K_DIR, full_gsm8k_dir
from tests.support.gsm8k_cli import MAX_RETRIES, load_run, run_cli
from tests.support.scripted_server import serve_openai

pytestmark = pytest.mark.ci_slow  # scripted OpenAI servers in fresh processes

SCRIPT = "tests.support.gsm8k_script:answer"
N = 60  # the whole fixture
PLAN = {
    "wrong": [1, 5, 17, 40, 57],
    "no_number": [7, 23, 50],
    "answer_is": [2, 11, 45],
    # the last third is slow, so that a Ctrl-C after 20 answers at --parallel 1 lands mid-run
    "slow": {"4": 0.3, "30": 0.3, **{str(i): 0.05 for i in range(40, 60)}},
    "abort": {"3": [503, 1], "33": [503, 1], "9": [503, -1], "59": [500, -1]},
}
ABORT_PATCH = "openai-abort-status"


def expected(n: int) -> dict:
    """What the runner must report for the first n questions, derived from PLAN alone."""
    ids = range(n)
    always = {int(i): code for i, (code, k) in PLAN["abort"].items() if k < 0 and int(i) < n}
    flaky = {int(i): (code, k) for i, (code, k) in PLAN["abort"].items() if k >= 0 and int(i) < n}
    wrong = [i for i in PLAN["wrong"] if i < n]
    invalid = [i for i in PLAN["no_number"] if i < n]
    errors, retries = {}, {}
    for code in always.values():
        errors[str(code)] = errors.get(str(code), 0) + 1
        retries[str(code)] = retries.get(str(code), 0) + MAX_RETRIES
    for code, k in flaky.values():
        retries[str(code)] = retries.get(str(code), 0) + k
    return {
        "correct": sum(1 for i in ids if i not in always and i not in wrong and i not in invalid),
        "invalid_count": len(invalid),
        "errors": dict(sorted(errors.items())),
        "retries": dict(sorted(retries.items())),
        "wrong": wrong,
        "invalid": invalid,
        "failed": sorted(always),
        "flaky": sorted(flaky),
        "attempts": n + sum(retries.values()),
    }


def _serve(data_dir, plan=PLAN, **env):
    return serve_openai(
        SCRIPT,
        env={"GSM8K_SCRIPT_PLAN": json.dumps(plan), "GSM8K_SCRIPT_DATA": str(data_dir), **env},
        startup_timeout_s=120,
    )


@pytest.fixture(scope="module")
def server():
    with _serve(GSM8K_DIR) as handle:
        yield handle


def check_against_plan(summary, records, n):
    want = expected(n)
    assert summary["num_questions"] == len(records) == n
    assert summary["correct"] == want["correct"]
    assert summary["accuracy"] == want["correct"] / n
    assert summary["invalid_count"] == want["invalid_count"] and summary["invalid"] == want["invalid_count"] / n
    assert summary["errors"] == want["errors"]
    assert summary["retries"] == want["retries"]
    by_id = {r["id"]: r for r in records}
    assert (
        sorted(
            i for i, r in by_id.items() if r["error"] is None and not r["correct"] and r["extracted_by"] != "invalid"
        )
        == want["wrong"]
    )
    assert sorted(i for i, r in by_id.items() if r["extracted_by"] == "invalid") == want["invalid"]
    assert sorted(i for i, r in by_id.items() if r["error"]) == want["failed"]
    assert sorted(i for i, r in by_id.items() if r["retried"] and not r["error"]) == want["flaky"]
    assert all(by_id[i]["attempts"] == MAX_RETRIES + 1 for i in want["failed"])
    assert all(by_id[i]["extracted_by"] == "answer-is" and by_id[i]["correct"] for i in PLAN["answer_is"] if i < n)
    return by_id


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


def test_server_dying_mid_run_finishes_reports_and_exits_2(capsys, tmp_path):
    with _serve(GSM8K_DIR, plan={"slow": {"*": 0.2}}) as dying:  # 60 questions, 8 at a time: about 1.5 s
        result = {}

        def runner():
            result["code"] = main(
                [
                    "--base-url",
                    dying.base_url,
                    "--data-dir",
                    str(GSM8K_DIR),
                    "--no-download",
                    "--no-progress",
                    "--parallel",
                    "8",
                    "--give-up-after",
                    "8",
                    "--max-retries",
                    "2",
                    "--retry-backoff",
                    "0.02",
                    "--output",
                    str(tmp_path),
                ]
            )

        thread = threading.Thread(target=runner)
        thread.start()
        while dying.stats()["finished"] < 16:
            assert thread.is_alive(), "the run ended before the server was killed"
            time.sleep(0.02)
        finished_at_kill = dying.stats()["finished"]
        dying.process.kill()
        dying.process.wait()
        thread.join(timeout=120)
        assert not thread.is_alive()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    summary, records = load_run(tmp_path)
    assert result["code"] == 2 and last.startswith("INCOMPLETE")
    assert len(records) == N and [r["id"] for r in records] == list(range(N))
    answered = [r for r in records if r["error"] is None]
    # finished in the server but not yet sent when it died: at most one per connection (--parallel 8)
    assert finished_at_kill - 8 <= len(answered) < N and all(r["correct"] for r in answered)
    assert set(summary["errors"]) <= {"connection", "skipped"} and summary["error_count"] == N - len(answered)
    assert summary["errors"].get("skipped", 0) > 0  # the runner gave up instead of hammering a dead server


def test_streamed_int_aborts_without_the_patch_are_reported_not_scored(capsys, tmp_path):
    """Upstream 0.5.20 alone streams an int-code abort as a graceful finish: no error, no text. The runner
    must count those as failed requests ("abort"), never as wrong or invalid answers."""
    with _serve(GSM8K_DIR, SGLANG_OVERLAY_DISABLE=ABORT_PATCH) as unpatched:
        assert ABORT_PATCH not in unpatched.stats()["overlay"]["applied"]
        code, last = run_cli(
            capsys,
            tmp_path,
            "--base-url",
            unpatched.base_url,
            "--stream",
            "--num-questions",
            N,
            "--parallel",
            32,
            "--max-error-rate",
            0.1,
        )
    summary, records = load_run(tmp_path)
    aborted = sorted(int(i) for i in PLAN["abort"])  # flaky ones too: a graceful abort is not retried
    assert summary["errors"] == {"abort": len(aborted)} and summary["retries"] == {}
    assert sorted(r["id"] for r in records if r["error"]) == aborted
    assert summary["invalid_count"] == len(PLAN["no_number"])
    assert code == 0 and last.startswith("PASS")  # 4 failed of 60 is within --max-error-rate 0.1


@pytest.mark.slow
@needs_full_gsm8k("runs all 1,319 test questions at --parallel 64 (the fixture has 60)")
def test_full_1319_at_parallel_64_is_exact(capsys, tmp_path):
    """The full test split, as the benchmark runs it (scripts/bench_gsm8k_runner.py times it); the plan's
    question ids are the fixture's, which are the first 60 of the full split."""
    full = full_gsm8k_dir()
    with _serve(full) as full_server:
        code, last = run_cli(capsys, tmp_path, "--base-url", full_server.base_url, "--parallel", 64, data_dir=full)
        summary, records = load_run(tmp_path)
        check_against_plan(summary, records, 1319)
        assert code == 0 and summary["requests_per_s"] > 0 and summary["config"]["data_source"] == "published"
        full_server.wait_idle()


def test_ctrl_c_keeps_the_answers_so_far_and_exits_2(tmp_path):
    """Question 20 is held for 8 s by this test's own server, so the Ctrl-C after 20 answers lands mid-run
    however slowly the test polls, and the run still ends within seconds if the request on the wire is
    answered before the runner stops."""
    import signal
    import subprocess
    import sys

    from tests.support.env import REPO, subprocess_env
    from tests.support.proc import with_default_sigint

    with _serve(GSM8K_DIR, plan={**PLAN, "slow": {**PLAN["slow"], "20": 8.0}}) as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "scripts" / "gsm8k_eval.py"),
                "--base-url",
                server.base_url,
                "--data-dir",
                str(GSM8K_DIR),
                "--no-progress",
                "--parallel",
                "1",
                "--retry-backoff",
                "0.02",
                "--output",
                str(tmp_path),
            ],
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=with_default_sigint,
        )
        while server.stats()["finished"] < 20:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    summary, records = load_run(tmp_path)
    assert proc.returncode == 2 and out.strip().splitlines()[-1].startswith("INCOMPLETE: interrupted"), err
    assert summary["interrupted"] and len(records) == N
    done = [r for r in records if r["error"] != "interrupted"]
    # The server counts attempts: a question the plan aborts takes extra requests (retries), and one
    # request (at the latest question 20, held) may be on the wire when SIGINT lands.
    extra = sum(MAX_RETRIES if k < 0 else min(k, MAX_RETRIES) for i, (_, k) in PLAN["abort"].items() if int(i) < 20)
    assert 20 - 1 - extra <= len(done) <= 21 and summary["errors"]["interrupted"] == N - len(done)
    assert sorted(r["id"] for r in done) == list(range(len(done)))  # --parallel 1: answered in order, none lost
