"""The plan of the GSM8K end-to-end tests (``test_e2e_*.py``): which questions the scripted answerer
(tests/support/gsm8k_script.py) answers wrongly, with no number, as "the answer is", slowly or by aborting, what
the runner must then report (derived from the plan alone), and a scripted server that follows it.

Invariant: no test here; the expected numbers come from ``PLAN`` and never from a run. Cost: ``serve_plan``
starts a scripted OpenAI server in a fresh process (seconds); the rest is arithmetic.
"""

import json

from tests.support.gsm8k_cli import MAX_RETRIES
from tests.support.scripted_server import serve_openai

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


def serve_plan(data_dir, plan=PLAN, **env):
    return serve_openai(
        SCRIPT,
        env={"GSM8K_SCRIPT_PLAN": json.dumps(plan), "GSM8K_SCRIPT_DATA": str(data_dir), **env},
        startup_timeout_s=120,
    )


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
