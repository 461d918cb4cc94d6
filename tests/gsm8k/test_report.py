"""GSM8K runner statistics, files and the baseline verdict (exit codes)."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_overlay_gsm8k import data, journal, render, report
from sglang_overlay_gsm8k.client import Outcome
from tests.support.env import GSM8K_DIR


@pytest.fixture(scope="module")
def test_split():
    return data.read_split(GSM8K_DIR / "test.jsonl")


@given(
    st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=200),
    st.sampled_from([0, 1, 50, 90, 99, 100]),
)
def test_percentile_matches_numpy(values, q):
    assert report.percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-12)


def test_percentile_of_nothing_is_none():
    assert report.percentile([], 50) is None


def _outcomes(test_split):
    """Question i: correct with latency i/100, except 3 wrong, 2 invalid, 2 errors."""
    outs = []
    for p in test_split[:40]:
        gold = p.answer.rsplit("####", 1)[1].strip()
        o = Outcome(
            p.index,
            text=f"work\n#### {gold}",
            finish_reason="stop",
            completion_tokens=10,
            latency_s=(p.index + 1) / 100,
            attempts=1,
        )
        if p.index in (3, 4, 5):
            o.text = "#### 123456789"
        elif p.index in (6, 7):
            o.text = "no idea"
        elif p.index == 8:
            o.text, o.error, o.latency_s, o.attempts, o.retried = "", "503", 0.5, 4, ["503"] * 3
        elif p.index == 9:
            o.text, o.error, o.latency_s = "", "timeout", 9.0
        elif p.index == 10:
            o.retried, o.attempts = ["connection"], 2
        outs.append(o)
    return outs


def test_summary_counts(test_split):
    records = [report.score(p, o) for p, o in zip(test_split, _outcomes(test_split))]
    s = report.summarize(records, wall_s=2.0, config={"mode": "completions"})
    assert (s["num_questions"], s["correct"], s["invalid_count"], s["error_count"]) == (40, 33, 2, 2)
    assert s["accuracy"] == 33 / 40 and s["invalid"] == 2 / 40 and s["error_rate"] == 2 / 40
    assert s["errors"] == {"503": 1, "timeout": 1}
    assert s["retries"] == {"503": 3, "connection": 1} and s["retry_count"] == 4
    ok_latencies = [(i + 1) / 100 for i in range(40) if i not in (8, 9)]
    assert s["latency_p50_s"] == pytest.approx(np.percentile(ok_latencies, 50))
    assert s["latency_p99_s"] == pytest.approx(np.percentile(ok_latencies, 99))
    assert s["output_tokens"] == 38 * 10 and s["output_tokens_per_s"] == 190.0 and s["requests_per_s"] == 20.0
    by_id = {r.id: r for r in records}
    assert by_id[6].extracted_by == "invalid" and by_id[8].extracted_by == "error" and not by_id[8].correct
    assert by_id[0].gold == "18" and by_id[0].prediction == "18" and by_id[3].prediction == "123456789"


def _summary(acc, errors=0, n=100, **config):
    return {
        "accuracy": acc,
        "num_questions": n,
        "error_rate": errors / n,
        "error_count": errors,
        "errors": {"503": errors} if errors else {},
        "config": config,
    }


@pytest.mark.parametrize(
    "acc,kwargs,code",
    [
        (0.95, {}, report.PASS),
        (0.95, {"min_accuracy": 0.95}, report.PASS),
        (0.94, {"min_accuracy": 0.95}, report.REGRESSION),
        (0.93, {"baseline": {"accuracy": 0.95}}, report.PASS),  # exactly at baseline - tolerance (float noise)
        (0.92, {"baseline": {"accuracy": 0.95}}, report.REGRESSION),
        (0.94, {"baseline": {"accuracy": 0.95}, "tolerance": 0.0}, report.REGRESSION),
        (0.99, {"baseline": {"accuracy": 0.95}, "min_accuracy": 0.995}, report.REGRESSION),
    ],
)
def test_verdict_exit_codes(acc, kwargs, code):
    got, reason = report.verdict(_summary(acc), **kwargs)
    assert got == code
    assert reason.startswith("PASS" if code == report.PASS else "FAIL")


def test_incomplete_beats_regression_and_names_the_errors():
    code, reason = report.verdict(_summary(0.5, errors=6), min_accuracy=0.9, max_error_rate=0.05)
    assert code == report.INCOMPLETE and "503: 6" in reason and "--max-error-rate" in reason
    assert report.verdict(_summary(0.95, errors=5), max_error_rate=0.05)[0] == report.PASS


def test_baseline_comparability_is_noted():
    base = _summary(0.95, n=1319, mode="chat")
    code, reason = report.verdict(_summary(0.96, mode="completions"), baseline=base)
    assert code == report.PASS and "1319" in reason and "mode differs" in reason


def test_bad_baseline_files(tmp_path):
    with pytest.raises(ValueError, match="--baseline"):
        report.load_baseline(str(tmp_path / "missing.json"))
    for content in ("not json", json.dumps({"acc": 0.9}), json.dumps({"accuracy": 1.5}), json.dumps([1])):
        (tmp_path / "b.json").write_text(content)
        with pytest.raises(ValueError, match="--baseline"):
            report.load_baseline(str(tmp_path / "b.json"))


def test_files(test_split, tmp_path):
    records = [report.score(p, o) for p, o in zip(test_split, _outcomes(test_split))]
    s = report.summarize(records, wall_s=2.0, config={"mode": "completions", "model": "m"})
    md = render.markdown(s, records, "FAIL: something")
    assert "**FAIL: something**" in md and "## Invalid (no number): 2" in md and "8 (503)" in md
    journal.write_records(tmp_path / "r.jsonl", records)
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(rows) == 40
    assert {"id", "question", "gold", "prediction", "output", "latency_s", "completion_tokens", "error"} <= set(rows[0])
    written = render.plot(tmp_path, records, s, {"accuracy": 0.9})
    assert [p.name for p in written] == ["accuracy.png", "latency.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)


def test_an_interrupted_run_is_incomplete_whatever_its_accuracy():
    s = {**_summary(1.0, n=10), "interrupted": True, "errors": {"interrupted": 7}}
    code, reason = report.verdict(s, min_accuracy=0.5)
    assert code == report.INCOMPLETE and "interrupted after 3 of 10" in reason
