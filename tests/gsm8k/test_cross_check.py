"""scripts/gsm8k_cross_check.py without a server: upstream's GSM8KEval builds our prompt from the file the script
writes, and the comparison counts agreements and names each disagreement (the real-model run is
tests/e2e/test_10_real_model.py)."""

from __future__ import annotations

import pytest

from sglang_overlay_gsm8k import data
from tests.support.env import GSM8K_DIR
from tests.support.scripts import load_script as load_named


def load_script():
    return load_named("gsm8k_cross_check")


def test_upstream_eval_reads_our_shots_and_questions_and_builds_our_prompt(tmp_path):
    from sglang.test.simple_eval_mixed_prefix_gsm8k import GSM8KEval

    cc, dataset = load_script(), data.load(str(GSM8K_DIR), allow_download=False)
    shots, questions = dataset.train[:5], dataset.test[:12]
    path = cc.upstream_file(shots, questions, tmp_path / "u.jsonl")
    eval_obj = GSM8KEval(len(questions), 1, 5, str(path))
    assert [x["question"] for x in eval_obj._lines] == [q.question for q in questions]  # no shot is a question
    cc.check_same_prompts(shots, questions, eval_obj)  # upstream's own prompt builder, string for string
    with pytest.raises(cc.CrossCheckError, match="prompts differ at test question 0"):
        cc.check_same_prompts(dataset.train[1:6], questions, eval_obj)  # other shots: refused before sending


def _rows(answers, correct, texts=None):
    texts = texts or [f"text {i}" for i in range(len(answers))]
    return [
        {"id": i, "output": t, "answer": a, "correct": c} for i, (a, c, t) in enumerate(zip(answers, correct, texts))
    ]


def test_agreement_is_counted_per_question_and_each_disagreement_named():
    cc = load_script()
    ours = _rows(["18", "3", None, "1"], [True, True, False, False])
    theirs = _rows(["18", "3", None, "3"], [True, True, False, False], ["text 0", "text 1", "text 2", "text 3"])
    fig = cc.compare(ours, theirs)
    assert (fig["same_text"], fig["same_answer"], fig["same_verdict"], fig["read_differently"]) == (4, 3, 4, 1)
    assert fig["disagreements"] == [dict(id=3, ours="1", upstream="3", why="the same text, read differently",
                                         correct_ours=False, correct_upstream=False)]  # fmt: skip
    assert fig["accuracy_ours"] == fig["accuracy_upstream"] == 0.5 and fig["inside_each_other"]
    assert fig["wilson95_ours"] == fig["wilson95_upstream"] and fig["wilson95_ours"][0] < 0.5 < fig["wilson95_ours"][1]


def test_accuracies_outside_each_others_interval_fail_the_check():
    cc = load_script()
    n = 100
    ours = _rows(["1"] * n, [True] * 90 + [False] * 10)
    theirs = _rows(["2"] * n, [True] * 50 + [False] * 50, [f"other {i}" for i in range(n)])
    fig = cc.compare(ours, theirs)
    assert not fig["inside_each_other"] and fig["same_text"] == 0 and len(fig["disagreements"]) == n
    assert {d["why"] for d in fig["disagreements"]} == {"different output text"}


def test_extracted_answers_compare_as_numbers():
    cc = load_script()
    assert [cc._number(v) for v in (30, -30.0, "1.50", "1,000", -9999999, None)] == [
        "30",
        "-30",
        "1.5",
        None,
        None,
        None,
    ]


@pytest.mark.parametrize("bad", [["--num-questions", "0"], ["--parallel", "0"], []])
def test_bad_arguments_are_refused_before_any_request(bad, capsys):
    cc = load_script()
    argv = bad if bad == [] else ["--base-url", "http://127.0.0.1:9", *bad]
    with pytest.raises(SystemExit) as exc:
        cc.parse_args(argv)
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err
    assert cc.parse_args(["--base-url", "http://h:1/v1/"]).base_url == "http://h:1"
