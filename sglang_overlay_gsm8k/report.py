"""Scoring a run, its statistics, and the baseline verdict (its tables and files: ``render``).

Accuracy and the invalid rate are over every selected question (a failed request
counts as not correct, never as invalid); latency percentiles are over the
requests that succeeded. Exit codes: 0 pass, 1 below ``--min-accuracy`` or more
than ``--tolerance`` under the baseline, 2 incomplete (more than
``--max-error-rate`` of the questions failed, or the run was interrupted), with the
reason printed last.

Invariants: every record is scored from its gold ``#### N`` (a failed request is
never parsed); the verdict reads only the summary. Cost: linear in the records
(one sort for the percentiles).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sglang_overlay_gsm8k.data import Problem
from sglang_overlay_gsm8k.outcome import Outcome
from sglang_overlay_gsm8k.scoring import extract_prediction, format_number, gold_answer, same_number

PASS, REGRESSION, INCOMPLETE = 0, 1, 2


@dataclass
class Record:
    id: int
    question: str
    gold: str
    prediction: str | None
    correct: bool
    extracted_by: str  # "####", "answer-is", "last-number", "invalid", or "error"
    output: str
    finish_reason: str | None
    latency_s: float | None
    ttft_s: float | None
    total_s: float
    attempts: int
    retried: list[str]
    prompt_tokens: int | None
    completion_tokens: int | None
    error: str | None
    error_message: str | None


def score(problem: Problem, out: Outcome) -> Record:
    gold = gold_answer(problem.answer)
    if out.error is None:
        pred, how = extract_prediction(out.text)
    else:
        pred, how = None, "error"
    return Record(
        id=problem.index,
        question=problem.question,
        gold=format_number(gold),
        prediction=format_number(pred),
        correct=same_number(pred, gold),
        extracted_by=how,
        output=out.text,
        finish_reason=out.finish_reason,
        latency_s=out.latency_s,
        ttft_s=out.ttft_s,
        total_s=out.total_s,
        attempts=out.attempts,
        retried=list(out.retried),
        prompt_tokens=out.prompt_tokens,
        completion_tokens=out.completion_tokens,
        error=out.error,
        error_message=out.error_message,
    )


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(records: list[Record], wall_s: float, config: dict) -> dict:
    n = len(records)
    ok = [r for r in records if r.error is None]
    latencies = [r.latency_s for r in ok if r.latency_s is not None]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    out_tokens = sum(r.completion_tokens or 0 for r in ok)
    errors = Counter(r.error for r in records if r.error is not None)
    retries = Counter(kind for r in records for kind in r.retried)
    correct = sum(r.correct for r in records)
    invalid = sum(r.extracted_by == "invalid" for r in records)

    def rounded(x: float | None) -> float | None:
        return None if x is None else round(x, 6)

    return {
        "accuracy": correct / n if n else 0.0,
        "correct": correct,
        "invalid": invalid / n if n else 0.0,
        "invalid_count": invalid,
        "errors": dict(sorted(errors.items())),
        "error_count": sum(errors.values()),
        "error_rate": sum(errors.values()) / n if n else 0.0,
        "retries": dict(sorted(retries.items())),
        "retry_count": sum(retries.values()),
        "num_questions": n,
        "latency_p50_s": rounded(percentile(latencies, 50)),
        "latency_p90_s": rounded(percentile(latencies, 90)),
        "latency_p99_s": rounded(percentile(latencies, 99)),
        "latency_mean_s": rounded(sum(latencies) / len(latencies)) if latencies else None,
        "ttft_p50_s": rounded(percentile(ttfts, 50)),
        "output_tokens": out_tokens,
        "output_tokens_per_s": out_tokens / wall_s if wall_s > 0 else None,
        "requests_per_s": n / wall_s if wall_s > 0 else None,
        "wall_s": round(wall_s, 6),
        "config": config,
    }


# ----- gating -----------------------------------------------------------------


def load_baseline(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--baseline {path}: cannot read a summary JSON: {exc}") from exc
    acc = data.get("accuracy") if isinstance(data, dict) else None
    if not isinstance(acc, (int, float)) or isinstance(acc, bool) or not 0.0 <= acc <= 1.0:
        raise ValueError(f"--baseline {path}: no 'accuracy' between 0 and 1 (is it a summary.json from this runner?)")
    return data


def _comparability(summary: dict, baseline: dict) -> list[str]:
    notes = []
    mine, theirs = summary.get("config", {}), baseline.get("config", {})
    if baseline.get("num_questions") != summary["num_questions"]:
        notes.append(f"baseline ran {baseline.get('num_questions')} questions, this run {summary['num_questions']}")
    for key in ("mode", "num_shots", "question_set", "data_sha256", "max_tokens", "temperature"):
        if key in theirs and theirs.get(key) != mine.get(key):
            notes.append(f"{key} differs (baseline {theirs.get(key)!r}, now {mine.get(key)!r})")
    return notes


def verdict(
    summary: dict,
    *,
    baseline: dict | None = None,
    tolerance: float = 0.02,
    min_accuracy: float | None = None,
    max_error_rate: float = 0.05,
) -> tuple[int, str]:
    """(exit code, reason). Incomplete beats regression: a broken run cannot be judged."""
    acc, n, eps = summary["accuracy"], summary["num_questions"], 1e-9
    if summary.get("interrupted"):
        return INCOMPLETE, (
            f"INCOMPLETE: interrupted after {n - summary['errors'].get('interrupted', 0)} of {n} "
            f"questions; accuracy {acc:.3f} is not a verdict"
        )
    if summary["error_rate"] > max_error_rate + eps:
        kinds = ", ".join(f"{k}: {v}" for k, v in summary["errors"].items())
        return INCOMPLETE, (
            f"INCOMPLETE: {summary['error_count']} of {n} questions failed ({kinds}), "
            f"more than --max-error-rate {max_error_rate:g}; accuracy {acc:.3f} is not a verdict"
        )
    reasons = []
    if min_accuracy is not None and acc < min_accuracy - eps:
        reasons.append(f"accuracy {acc:.3f} < --min-accuracy {min_accuracy:.3f}")
    notes = []
    if baseline is not None:
        floor = baseline["accuracy"] - tolerance
        notes = _comparability(summary, baseline)
        if acc < floor - eps:
            reasons.append(f"accuracy {acc:.3f} < baseline {baseline['accuracy']:.3f} - tolerance {tolerance:.3f}")
    tail = f" (note: {'; '.join(notes)})" if notes else ""
    if reasons:
        return REGRESSION, "FAIL: " + "; ".join(reasons) + tail
    checks = []
    if min_accuracy is not None:
        checks.append(f">= --min-accuracy {min_accuracy:.3f}")
    if baseline is not None:
        checks.append(f"within {tolerance:.3f} of baseline {baseline['accuracy']:.3f}")
    return PASS, f"PASS: accuracy {acc:.3f}" + (" " + " and ".join(checks) if checks else " (no gate set)") + tail
