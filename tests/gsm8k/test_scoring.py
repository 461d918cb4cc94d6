"""Answer extraction and numeric comparison for the GSM8K runner, on the real dataset and real-looking outputs."""

import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_overlay_gsm8k.scoring import (
    GoldAnswerError,
    extract_prediction,
    format_number,
    gold_answer,
    same_number,
)
from tests.gsm8k.full_splits import needs_full_gsm8k
from tests.support.env import GSM8K_DIR, full_gsm8k_dir


def _rows(directory, split):
    with open(directory / split, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _final(answer: str) -> str:
    return answer.rsplit("####", 1)[1].strip()


def _check_every_gold_answer(rows):
    for row in rows:
        gold = gold_answer(row["answer"])
        written = Decimal(_final(row["answer"]).replace(",", ""))
        assert gold == written
        # the worked answer as a model would echo it, and its other phrasings
        assert extract_prediction(row["answer"]) == (gold, "####")
        body = row["answer"].rsplit("####", 1)[0]
        assert extract_prediction(body + f"The answer is {_final(row['answer'])}.") == (gold, "answer-is")
        assert extract_prediction(f"so the total is {_final(row['answer'])}") == (gold, "last-number")


@pytest.mark.parametrize("split,count", [("test.jsonl", 60), ("train.jsonl", 400)])
def test_every_gold_answer_of_the_fixture_extracts_to_itself(split, count):
    rows = _rows(GSM8K_DIR, split)
    assert len(rows) == count
    _check_every_gold_answer(rows)


@needs_full_gsm8k("extracts every one of the 8,792 published gold answers (the fixture has 460 of them)")
@pytest.mark.parametrize("split,count", [("test.jsonl", 1319), ("train.jsonl", 7473)])
def test_every_gold_answer_of_the_full_splits_extracts_to_itself(split, count):
    rows = _rows(full_gsm8k_dir(), split)
    assert len(rows) == count
    _check_every_gold_answer(rows)


REAL_LOOKING = [
    # (model output, expected value, how)
    (
        " Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18.\n#### 18",
        "18",
        "####",
    ),
    (" He paid 80,000+50,000=$130,000\n#### $70,000\n\n", "70000", "####"),
    ("#### 1,450,000", "1450000", "####"),
    ("The temperature fell 13 degrees.\n#### -10", "-10", "####"),
    ("####  −3", "-3", "####"),
    ("#### 12.50", "12.5", "####"),
    ("#### 7.\n", "7", "####"),
    ("First 3 + 4 = 7.\nThe answer is 7.", "7", "answer-is"),
    ("So she earns $1,200 a month. The answer is: $1,200.", "1200", "answer-is"),
    ("Step 1: 12/4 = 3. Therefore the answer is 3 pies.", "3", "answer-is"),
    ("The answer is 25%.", "25", "answer-is"),
    ("The answer is -4 degrees.", "-4", "answer-is"),
    ("She has 5 apples and buys 7 more, so 12 apples in total.", "12", "last-number"),
    ("It costs $0.75 per cup, so 4 cups cost $3.00.", "3", "last-number"),
    ("5-3=2", "2", "last-number"),
    ("x - 2 = 10, so x = 12.", "12", "last-number"),
    ("It loses 60 a year - 30%", "30", "last-number"),  # a spaced minus after a word subtracts
    ("so 16 - 3", "3", "last-number"),
    ("The change is = - 7", "-7", "last-number"),  # after "=" a spaced minus is still a sign
    ("#### - 5", "-5", "####"),
    ("The answer is - 4.", "-4", "answer-is"),
    ("That leaves .5 of the pizza", "0.5", "last-number"),
    ("#### eighteen, i.e. 18", "18", "####"),
    ("####\nno number after the marker; 4 + 4 = 8", "8", "last-number"),
    ("I cannot determine the answer from the information given.", None, "invalid"),
    ("", None, "invalid"),
    ("The answer is unclear.", None, "invalid"),
]


@pytest.mark.parametrize("output,expected,how", REAL_LOOKING)
def test_extraction_table(output, expected, how):
    value, got_how = extract_prediction(output)
    assert got_how == how
    assert format_number(value) == expected


def test_hashes_win_over_later_numbers_and_answer_is_over_last_number():
    assert extract_prediction("#### 42\nQuestion 2 has 17 apples")[0] == 42
    assert extract_prediction("The answer is 9. Next, 10 more examples")[0] == 9


def test_numeric_comparison():
    assert same_number(Decimal("18.00"), Decimal("18"))
    assert same_number(extract_prediction("$1,000")[0], gold_answer("x\n#### 1000"))
    assert not same_number(Decimal("18.5"), Decimal("18"))
    assert not same_number(None, Decimal("0"))
    assert same_number(extract_prediction("#### 0")[0], Decimal("0"))


@pytest.mark.parametrize("bad", ["no hashes here 12", "some work\n#### ", "#### none"])
def test_gold_without_number_is_an_error(bad):
    with pytest.raises(GoldAnswerError):
        gold_answer(bad)


def _grouped(n: int) -> str:
    return f"{n:,}"


@given(
    st.integers(min_value=-(10**9), max_value=10**9),
    st.sampled_from(["", "$"]),
    st.booleans(),
    st.sampled_from(["", ".", " dollars."]),
)
def test_written_integers_round_trip(n, currency, grouped, tail):
    digits = _grouped(abs(n)) if grouped else str(abs(n))
    text = ("-" if n < 0 else "") + currency + digits + tail
    for output in (f"#### {text}", f"The answer is {text}", f"so it is {text}"):
        assert extract_prediction(output)[0] == n


@given(st.decimals(min_value=-(10**6), max_value=10**6, places=2, allow_nan=False, allow_infinity=False))
def test_decimals_round_trip_and_format(d):
    text = format(d, "f")
    value = extract_prediction(f"#### {text}")[0]
    assert value == d
    assert Decimal(format_number(value)) == d


# ----- whatever a model writes scores without an exception ------------------------------------------------

HOWS = {"####", "answer-is", "last-number", "invalid"}
_TEXTY = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("0123456789,.$-−#\n eE"), max_size=400)


def _scores(output: str) -> Decimal | None:
    value, how = extract_prediction(output)
    assert how in HOWS
    assert (value is None) == (how == "invalid")
    written = format_number(value)
    if value is not None:
        assert Decimal(written) == value and written.isascii()  # exact, at any length
    return value


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600) | _TEXTY)
def test_any_text_scores(output):
    _scores(output)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from(["#### {}", "The answer is {}.", "so the total is {} apples", "{}"]),
    st.booleans(),
)
def test_integers_of_any_length_are_read_exactly(n, phrase, grouped):
    digits = f"{abs(n):,}" if grouped else str(abs(n))
    assert _scores(phrase.format(("-" if n < 0 else "") + digits)) == n
    assert format_number(Decimal(n)) == str(n)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(categories=["Nd"]), min_size=1, max_size=80))
def test_digits_of_any_script_are_read_as_their_value(digits):
    assert _scores(f"#### {digits}") == Decimal(int(digits))


@settings(max_examples=100, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False), st.integers(min_value=0, max_value=400))
def test_exponents_and_long_decimals_score(d, exponent):
    _scores(f"The answer is {d}")  # Decimal's own spelling, exponents included ("1E+400")
    _scores(f"#### 1e{exponent} and 1E-{exponent}")


@pytest.mark.parametrize("size", [20_000, 200_000])
def test_outputs_of_many_thousand_characters(size):
    words = ("Step 12: add 3,456 to 7.5 and carry " * (size // 36 + 1))[:size]
    assert _scores(words + " #### 42") == 42
    assert _scores("#### " * (size // 5)) is None
    assert _scores("answer is " + "9" * size) == Decimal("9" * size)  # past int()'s 4,300-digit limit
    assert _scores(words) is not None
