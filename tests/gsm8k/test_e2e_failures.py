"""The GSM8K runner end to end when a run goes wrong: the server dies mid-run, the run is interrupted (Ctrl-C),
and upstream without the abort-status patch streams int-code aborts as graceful finishes.

Real HTTP against the installed upstream's OpenAI completions/chat handlers (tests/support/scripted_server.py,
overlay applied through the plugin path) with a scripted answerer (tests/support/gsm8k_script.py) that answers a
known set of questions wrongly, with no number, slowly, or by aborting with an int status code (the plan:
``e2e_plan.py``).
Invariant: the runner still writes its reports and keeps the answers so far, exits 2 (INCOMPLETE) where
questions went unanswered, and counts failed requests as errors, never as wrong or invalid answers.
Cost: a scripted server in a fresh process per test (``ci_slow``), one more interpreter for the Ctrl-C run;
all on the committed fixture (60 test questions).
"""

import threading
import time

import pytest

from sglang_overlay_gsm8k.cli import main
from tests.gsm8k.e2e_plan import ABORT_PATCH, PLAN, N, serve_plan
from tests.support.env import GSM8K_DIR
from tests.support.gsm8k_cli import MAX_RETRIES, load_run, run_cli

pytestmark = pytest.mark.ci_slow  # scripted OpenAI servers in fresh processes


def test_server_dying_mid_run_finishes_reports_and_exits_2(capsys, tmp_path):
    with serve_plan(GSM8K_DIR, plan={"slow": {"*": 0.2}}) as dying:  # 60 questions, 8 at a time: about 1.5 s
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
    """Upstream alone (the abort patch disabled) streams an int-code abort as a graceful finish: no error, no text. The runner
    must count those as failed requests ("abort"), never as wrong or invalid answers."""
    with serve_plan(GSM8K_DIR, SGLANG_OVERLAY_DISABLE=ABORT_PATCH) as unpatched:
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


def test_ctrl_c_keeps_the_answers_so_far_and_exits_2(tmp_path):
    """Question 20 is held for 8 s by this test's own server, so the Ctrl-C after 20 answers lands mid-run
    however slowly the test polls, and the run still ends within seconds if the request on the wire is
    answered before the runner stops."""
    import signal
    import subprocess
    import sys

    from tests.support.env import REPO, subprocess_env
    from tests.support.proc import with_default_sigint

    with serve_plan(GSM8K_DIR, plan={**PLAN, "slow": {**PLAN["slow"], "20": 8.0}}) as server:
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
