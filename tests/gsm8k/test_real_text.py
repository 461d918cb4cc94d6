"""The runner survives what real models write, and keeps every answer when it does not.

Whole runs of ``sglang-overlay gsm8k`` (``main``) against an in-process httpx transport: a stand-in for the
server that answers each question with a text a real model wrote or could write (the 32-digit number that
crashed a run on SmolLM2-135M, ``1e400``, non-ASCII digits, no digit, tens of thousands of characters, a lone
surrogate). The real server runs in tests/e2e/test_10_real_model.py; the scorer's property tests are in
test_scoring.py.
"""

import json

import httpx
import pytest

from sglang_overlay_gsm8k import client, report
from sglang_overlay_gsm8k.cli import main
from tests.support.env import GSM8K_DIR

QUESTIONS = [json.loads(line)["question"] for line in (GSM8K_DIR / "test.jsonl").read_text().splitlines()]
# question index -> (what the model wrote, the prediction the record must hold)
WRITTEN = {
    0: ("The total is 12345678901234567890123456789012 apples", "12345678901234567890123456789012"),
    1: ("So she has 1e400 marbles.", "1"),
    2: ("The answer is ٣٤٥.", "345"),
    3: ("I do not know how many there are.", None),
    4: (
        "carry the one " * 3000 + "so 98765432109876543210987654321098765.25",
        "98765432109876543210987654321098765.25",
    ),
    5: ("#### " + "9" * 5000, "9" * 5000),
    6: ("It is \ud800 strange, -0.00", "0"),
    7: ("−123456789012345678901234567890 degrees", "-123456789012345678901234567890"),
}


def _answer_for(prompt: str) -> str:
    question = prompt.rsplit("Question: ", 1)[1].rsplit("\nAnswer:", 1)[0].strip()
    i = next(k for k, q in enumerate(QUESTIONS) if q.strip() == question)
    return WRITTEN.get(i, ("#### 0", None))[0]


def _server(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "stand-in"}]})
    text = _answer_for(json.loads(request.content)["prompt"])
    body = {
        "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # json.dumps escapes a lone surrogate as a server's JSON would ("\\ud800")
    return httpx.Response(200, content=json.dumps(body), headers={"content-type": "application/json"})


@pytest.fixture
def stand_in_server(monkeypatch):
    real = client._make_client

    def make(cfg, transport=None, *args, **kwargs):
        return real(cfg, httpx.MockTransport(_server), *args, **kwargs)

    monkeypatch.setattr(client, "_make_client", make)


def _run(capsys, out_dir, n, *extra):
    argv = ["--base-url", "http://stand-in", "--data-dir", str(GSM8K_DIR), "--no-download", "--no-progress"]
    code = main([*argv, "--num-questions", str(n), "--parallel", "1", "--output", str(out_dir), *extra])
    return code, capsys.readouterr().out.strip().splitlines()[-1]


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_what_real_models_write_is_scored_and_every_answer_recorded(stand_in_server, capsys, tmp_path):
    code, last = _run(capsys, tmp_path, 10)
    records = _lines(tmp_path / "results.jsonl")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == 0 and last.startswith("PASS"), last
    assert [r["id"] for r in records] == list(range(10)) and summary["incomplete"] is False
    for i, (text, prediction) in WRITTEN.items():
        assert records[i]["prediction"] == prediction, i
        assert records[i]["output"] == text, i  # a lone surrogate round-trips through the file
    assert records[3]["extracted_by"] == "invalid" and summary["invalid_count"] == 1


def _scoring_fails_at(monkeypatch, nth: int, exc: Exception) -> list[int]:
    """The runner's scorer raises ``exc`` on its ``nth`` call (a stand-in for any bug inside the run); returns
    the question ids scored, in order, the failing one included."""
    real_score, calls = report.score, []

    def score(problem, out):
        calls.append(out.index)
        if len(calls) == nth:
            raise exc
        return real_score(problem, out)

    monkeypatch.setattr(report, "score", score)
    return calls


def test_an_error_inside_the_runner_is_exit_2_and_keeps_the_answers_so_far(
    stand_in_server, monkeypatch, capsys, tmp_path
):
    """A bug while scoring the sixth answer (any exception inside the run): exit 2 with the reason last, never
    1 (accuracy below the bar); the five answers before it are in results.jsonl; summary.json says incomplete."""
    calls = _scoring_fails_at(monkeypatch, 6, ArithmeticError("a bug the scorer did not foresee"))
    code, last = _run(capsys, tmp_path, 20)
    assert code == 2, last
    assert last.startswith(
        "INCOMPLETE: internal error in the runner: ArithmeticError: a bug the scorer did not foresee"
    )
    assert [r["id"] for r in _lines(tmp_path / "results.jsonl")] == calls[:5] == [0, 1, 2, 3, 4]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["incomplete"] is True and summary["answered"] == [5] and summary["num_questions_selected"] == 20
    assert summary["num_questions"] == 5
    assert summary["verdict"] == {"exit_code": 2, "reason": last.split("; answers")[0]}


def test_a_paired_run_journals_both_sides_as_they_arrive(stand_in_server, monkeypatch, capsys, tmp_path):
    """With --against, B's answers go to results_b.jsonl as they come too; a crash keeps both sides: every
    answer scored before or after the failing one (the other side runs on until the loop stops) is on disk."""
    calls = _scoring_fails_at(monkeypatch, 9, RuntimeError("boom"))
    code, last = _run(capsys, tmp_path, 10, "--against", "http://stand-in-b", "--max-flips", "0")
    a, b = _lines(tmp_path / "results.jsonl"), _lines(tmp_path / "results_b.jsonl")
    assert code == 2 and "RuntimeError: boom" in last
    assert len(a) + len(b) == len(calls) - 1 >= 8
    assert json.loads((tmp_path / "summary.json").read_text())["answered"] == [len(a), len(b)]
