"""The paired verdict: McNemar's exact test, the 2x2 counts, ``--against`` and ``--paired-with`` end to end.

The counts are checked against a scripted server pair (tests/support/gsm8k_script.py, real HTTP through
upstream's OpenAI handlers) whose wrong answers are known per question, so every number of ``paired`` is
derived from the two plans alone."""

from __future__ import annotations

import json
from fractions import Fraction
from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_overlay_gsm8k import paired
from sglang_overlay_gsm8k.report import Record
from tests.support.env import GSM8K_DIR
from tests.support.gsm8k_cli import MAX_RETRIES, load_run, run_cli
from tests.support.scripted_server import serve_openai

SCRIPT = "tests.support.gsm8k_script:answer"
N = 40
PLAN_A = {"wrong": [1, 5, 17], "no_number": [7]}
PLAN_B = {"wrong": [5, 9, 12, 20, 31, 33], "no_number": [7, 8]}


def _binomial_p(a: int, b: int) -> float:
    """The exact two-sided McNemar p from first principles: the probability, under Binomial(n, 1/2), of an
    outcome at most as likely as the observed one (equal to the doubled tail for this symmetric law)."""
    n = a + b
    if n == 0:
        return 1.0
    pk = Fraction(comb(n, a), 2**n)
    return float(
        min(Fraction(1), sum(Fraction(comb(n, i), 2**n) for i in range(n + 1) if Fraction(comb(n, i), 2**n) <= pk))
    )


@pytest.mark.parametrize("a, b, p", [(0, 0, 1.0), (0, 5, 0.0625), (5, 0, 0.0625), (1, 9, 0.021484375),
                                     (5, 5, 1.0), (0, 10, 2 / 1024), (3, 4, 1.0)])  # fmt: skip
def test_mcnemar_exact_known_values(a, b, p):
    assert paired.mcnemar_exact(a, b) == pytest.approx(p, abs=1e-15)


@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_exact_is_symmetric_and_the_binomial_test(a, b):
    assert paired.mcnemar_exact(a, b) == paired.mcnemar_exact(b, a)
    assert paired.mcnemar_exact(a, b) == pytest.approx(_binomial_p(a, b), rel=1e-12)


def rec(i: int, correct: bool, prediction: str | None = None, error: str | None = None) -> Record:
    return Record(
        id=i,
        question="q",
        gold="1",
        prediction=prediction if prediction is not None else ("1" if correct else "2"),
        correct=correct,
        extracted_by="####",
        output="",
        finish_reason="stop",
        latency_s=0.1,
        ttft_s=None,
        total_s=0.1,
        attempts=1,
        retried=[],
        prompt_tokens=1,
        completion_tokens=1,
        error=error,
        error_message=None,
    )


def test_pair_counts_flips_changes_and_leaves_out_failed_requests():
    a = [rec(0, True), rec(1, True), rec(2, False), rec(3, False), rec(4, True, error="503"), rec(5, False, "7")]
    b = [rec(0, True), rec(1, False), rec(2, True), rec(3, False), rec(4, True), rec(5, False, "8")]
    p = paired.pair(a, b)
    assert (p["n"], p["both_correct"], p["a_only"], p["b_only"], p["both_wrong"], p["excluded"]) == (5, 1, 1, 1, 2, 1)
    assert [f["index"] for f in p["flipped"]] == [1, 2] and [c["index"] for c in p["changed"]] == [1, 2, 5]
    assert p["flipped"][0] == {
        "index": 1,
        "gold": "1",
        "a": {"answer": "1", "correct": True, "extracted_by": "####"},
        "b": {"answer": "2", "correct": False, "extracted_by": "####"},
    }
    assert p["same_answer"] == 2 and p["agreement"] == 2 / 5 and p["mcnemar_p"] == 1.0
    with pytest.raises(paired.PairingError):
        paired.pair(a, b[::-1])


def test_the_verdict_fails_only_for_a_worse_b_or_too_many_changes():
    base = {"n": 30, "both_correct": 10, "both_wrong": 10, "changed": [], "flipped": []}
    worse = {**base, "a_only": 10, "b_only": 0, "mcnemar_p": paired.mcnemar_exact(10, 0)}
    better = {**base, "a_only": 0, "b_only": 10, "mcnemar_p": paired.mcnemar_exact(0, 10)}
    assert (
        paired.verdict(worse, 0, 0, 0.05, None)[0] == 1
        and "B is worse than A" in paired.verdict(worse, 0, 0, 0.05, None)[1]
    )
    assert paired.verdict(better, 0, 0, 0.05, None)[0] == 0  # B better: not a regression of B
    assert paired.verdict(worse, 0, 0, 0.001, None)[0] == 0  # p 0.00195 is not below 0.001
    changed = {**base, "a_only": 0, "b_only": 0, "mcnemar_p": 1.0, "changed": [{"index": 3}]}
    assert paired.verdict(changed, 0, 0, 0.05, 1)[0] == 0 and paired.verdict(changed, 0, 0, 0.05, 0)[0] == 1
    assert paired.verdict(changed, 0, 2, 0.05, 0)[0] == 2  # B incomplete: no verdict


def expected_pair(n: int) -> dict:
    """Both sides' correctness from the two plans alone (a no-number answer is wrong, never a failure)."""
    wrong_a = {i for k in ("wrong", "no_number") for i in PLAN_A[k] if i < n}
    wrong_b = {i for k in ("wrong", "no_number") for i in PLAN_B[k] if i < n}
    a_only, b_only = sorted(wrong_b - wrong_a), sorted(wrong_a - wrong_b)
    # "wrong" answers are gold + 1 on both sides, "no_number" answers are None: equal where both plans agree
    changed = sorted(wrong_a ^ wrong_b)
    return {
        "n": n,
        "both_correct": n - len(wrong_a | wrong_b),
        "a_only": len(a_only),
        "b_only": len(b_only),
        "both_wrong": len(wrong_a & wrong_b),
        "flipped": sorted(a_only + b_only),
        "changed": changed,
        "mcnemar_p": paired.mcnemar_exact(len(a_only), len(b_only)),
    }


@pytest.fixture(scope="module")
def pair_of_servers():
    def serve(plan):
        return serve_openai(
            SCRIPT,
            env={"GSM8K_SCRIPT_PLAN": json.dumps(plan), "GSM8K_SCRIPT_DATA": str(GSM8K_DIR)},
            startup_timeout_s=120,
        )

    with serve(PLAN_A) as a, serve(PLAN_B) as b:
        yield a, b


def check_paired(summary: dict, n: int) -> None:
    want, got = expected_pair(n), summary["paired"]
    for key in ("n", "both_correct", "a_only", "b_only", "both_wrong", "mcnemar_p"):
        assert got[key] == want[key], (key, got[key], want[key])
    assert [f["index"] for f in got["flipped"]] == want["flipped"]
    assert [c["index"] for c in got["changed"]] == want["changed"]
    assert got["excluded"] == 0 and got["same_answer"] == n - len(want["changed"])


@pytest.mark.ci_slow  # two scripted servers in fresh processes
def test_against_a_second_server_gives_the_exact_paired_counts(pair_of_servers, capsys, tmp_path):
    a, b = pair_of_servers
    before = (a.stats()["requests"], b.stats()["requests"])
    code, last = run_cli(
        capsys, tmp_path, "--base-url", a.base_url, "--against", b.base_url, "--num-questions", N, "--parallel", 8
    )
    summary, records = load_run(tmp_path)
    check_paired(summary, N)
    assert (a.stats()["requests"] - before[0], b.stats()["requests"] - before[1]) == (N, N)  # each asked once
    assert summary["b"]["config"]["base_url"].startswith(b.base_url) and summary["b"]["num_questions"] == N
    # B (6 wrong + 2 without a number) is worse than A (3 + 1): 6 vs 2 discordant, p 0.289, not significant
    assert summary["paired"]["mcnemar_p"] == 74 / 256 and code == 0 and last.startswith("PASS"), last
    files = {p.name for p in tmp_path.iterdir()}
    assert {"results.jsonl", "results_b.jsonl", "summary.json", "report.md", "paired.png"} <= files
    report = (tmp_path / "report.md").read_text()
    assert "## Paired A/B" in report and "| A correct | 30 | 6 |" in report and "### Flipped" in report
    b_rows = [json.loads(x) for x in (tmp_path / "results_b.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in b_rows if not r["correct"]) == sorted(PLAN_B["wrong"] + PLAN_B["no_number"])

    code, last = run_cli(
        capsys, None, "--base-url", a.base_url, "--against", b.base_url, "--num-questions", N, "--max-flips", 0
    )
    assert code == 1 and "more than --max-flips 0" in last and "1, 8, 9, 12, 17" in last, last
    code, last = run_cli(
        capsys, None, "--base-url", a.base_url, "--against", a.base_url, "--num-questions", N, "--max-flips", 0
    )
    assert code == 0 and "0 answer(s) changed" in last, last


@pytest.mark.ci_slow  # two scripted servers in fresh processes
def test_a_significantly_worse_b_fails(pair_of_servers, capsys, tmp_path):
    a, b = pair_of_servers
    code, last = run_cli(
        capsys, None, "--base-url", a.base_url, "--against", b.base_url, "--num-questions", N, "--alpha", 0.3
    )  # 6 vs 2 discordant: p 0.289
    assert code == 1 and "B is worse than A" in last, last
    code, last = run_cli(
        capsys, None, "--base-url", b.base_url, "--against", a.base_url, "--num-questions", N, "--alpha", 0.3
    )  # the other way round: B better, no failure
    assert code == 0, last


@pytest.mark.ci_slow  # two scripted servers in fresh processes
def test_paired_with_a_saved_run_and_refusals(pair_of_servers, capsys, tmp_path):
    a, b = pair_of_servers
    code, _ = run_cli(capsys, tmp_path / "saved", "--base-url", b.base_url, "--num-questions", N)
    assert code == 0
    code, last = run_cli(
        capsys, tmp_path / "new", "--base-url", a.base_url, "--paired-with", tmp_path / "saved", "--num-questions", N
    )
    summary, _ = load_run(tmp_path / "new")
    check_paired(summary, N)
    assert code == 0 and summary["b"]["source"] == str((tmp_path / "saved").resolve())
    assert not (tmp_path / "new" / "results_b.jsonl").exists()  # the saved run stays where it is
    for args, message in [(("--num-questions", 30), "question set"), (("--sample", 40, "--seed", 3), "question set")]:
        code, last = run_cli(capsys, None, "--base-url", a.base_url, "--paired-with", tmp_path / "saved", *args)
        assert code == 2 and message in last and "Traceback" not in last, last
    code, last = run_cli(capsys, None, "--base-url", a.base_url, "--paired-with", tmp_path, "--num-questions", N)
    assert code == 2 and "not a saved run of this runner" in last, last
    code, last = run_cli(capsys, None, "--base-url", a.base_url, "--max-flips", 0, "--num-questions", N)
    assert code == 2 and "--max-flips needs --against or --paired-with" in last, last
    assert MAX_RETRIES  # the shared CLI wrapper's retry setting (no aborts are scripted here)
