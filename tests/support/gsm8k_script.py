"""Scripted GSM8K answerer for tests/support/scripted_server.py (runs in the server process).

``answer(prompt_text, request)`` finds the GSM8K test question the prompt ends with
(the text after the last "Question: ", up to a trailing "\\nAnswer:"; for chat that is
the last user turn) and answers with the dataset's own worked answer, except for the
questions named in the JSON plan in ``$GSM8K_SCRIPT_PLAN``::

    {"wrong": [i, ...],           # the worked answer, but "#### <gold + 1>"
     "no_number": [i, ...],       # prose with no digit in it
     "answer_is": [i, ...],       # correct, phrased "The answer is $N." instead of "#### N"
     "slow": {"i": seconds, ...}, # correct, after sleeping ("*": every question)
     "abort": {"i": [status, k]}} # abort with int status on the first k attempts of every
                                  # k + 1 (then answer correctly); k = -1: abort always

Attempts are counted per (question, endpoint, streamed or not) in this process, so
every run that retries each flaky question once sees "abort, then success". The data directory is
``$GSM8K_SCRIPT_DATA`` (default: the committed fixture, tests/data/gsm8k; the full splits'
questions are the fixture's and more, in the same order, so a plan for the fixture holds there too).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

_DEFAULT_DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "gsm8k"
_QUESTIONS: dict[str, int] = {}
_ANSWERS: list[str] = []
_PLAN: dict | None = None
ATTEMPTS: Counter = Counter()


def load_plan(raw: str | None) -> dict:
    plan = json.loads(raw) if raw else {}
    unknown = set(plan) - {"wrong", "no_number", "answer_is", "slow", "abort"}
    if unknown:
        raise ValueError(f"GSM8K_SCRIPT_PLAN: unknown keys {sorted(unknown)}")
    return {
        "wrong": {int(i) for i in plan.get("wrong", [])},
        "no_number": {int(i) for i in plan.get("no_number", [])},
        "answer_is": {int(i) for i in plan.get("answer_is", [])},
        "slow": {(i if i == "*" else int(i)): float(s) for i, s in plan.get("slow", {}).items()},
        "abort": {int(i): (int(v[0]), int(v[1])) for i, v in plan.get("abort", {}).items()},
    }


def _load() -> None:
    global _PLAN
    if _PLAN is not None:
        return
    data = Path(os.environ.get("GSM8K_SCRIPT_DATA") or _DEFAULT_DATA) / "test.jsonl"
    with open(data, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            row = json.loads(line)
            _QUESTIONS[row["question"].strip()] = i
            _ANSWERS.append(row["answer"])
    _PLAN = load_plan(os.environ.get("GSM8K_SCRIPT_PLAN"))


def question_index(prompt_text: str) -> int:
    _load()
    at = prompt_text.rfind("Question: ")
    if at < 0:
        raise ValueError(f"no 'Question: ' in prompt ending {prompt_text[-120:]!r}")
    text = prompt_text[at + len("Question: ") :]
    if text.endswith("\nAnswer:"):
        text = text[: -len("\nAnswer:")]
    key = text.strip()
    if key not in _QUESTIONS:
        raise KeyError(f"not a GSM8K test question: {key[:120]!r}")
    return _QUESTIONS[key]


def _gold(worked: str) -> str:
    return worked.rsplit("####", 1)[1].strip()


def _with_final(worked: str, final: str) -> str:
    return worked.rsplit("####", 1)[0] + final


def answer(prompt_text: str, request: dict) -> list[dict]:
    i = question_index(prompt_text)
    plan = _PLAN
    worked = _ANSWERS[i]
    lead = " " if "prompt" in request else ""  # completions continue after "Answer:"
    key = (i, bool(lead), bool(request.get("stream")))
    ATTEMPTS[key] += 1
    if i in plan["abort"]:
        status, k = plan["abort"][i]
        if k < 0 or (ATTEMPTS[key] - 1) % (k + 1) < k:
            return [{"abort": status, "message": f"scripted abort of question {i}"}]
    if i in plan["wrong"]:
        gold = int(_gold(worked).replace(",", ""))
        return [{"text": lead + _with_final(worked, f"#### {gold + 1}")}]
    if i in plan["no_number"]:
        return [{"text": lead + "I am not able to work this one out, sorry."}]
    delay = plan["slow"].get(i, plan["slow"].get("*"))
    steps = [{"sleep": delay}] if delay else []
    if i in plan["answer_is"]:
        steps.append({"text": lead + _with_final(worked, f"The answer is ${_gold(worked)}.")})
    else:
        steps.append({"text": lead + worked})
    return steps
