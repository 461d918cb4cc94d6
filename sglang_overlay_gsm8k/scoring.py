"""GSM8K answers: the gold number after ``####`` and the number a model's output commits to.

The prediction is read, in this order, from ``#### N``, from "The answer is N", and
otherwise from the last number in the output. Numbers may carry thousands commas,
a currency sign, a sign (``-``, the Unicode minus: not after a word or number, where it subtracts), a decimal part, a trailing
period or percent sign. Comparison is numeric and exact (``Decimal``), so "18.00"
equals "18" and "1,000" equals "1000".

Any text scores without an exception, however long its numbers or the text itself (a property
test holds the scorer to that); values are exact at any length (never rounded to a context's precision).

Invariant: every gold answer of the published splits extracts to its own ``#### N``
(tested on the whole of both splits where they are present). Cost: a few regex
scans per output; standard library only.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_CURRENCY = "$€£¥₹"
_MINUS = "-−–"  # ASCII hyphen-minus, Unicode minus, en dash (seen in model outputs)
# A number: optional sign and currency in either order, then grouped or plain digits, optional decimals.
_NUMBER = re.compile(
    rf"(?P<sign>[{_MINUS}])?\s?[{re.escape(_CURRENCY)}]?\s?(?P<sign2>[{_MINUS}])?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
)
_HASHES = re.compile(r"####[ \t]*")
_THE_ANSWER_IS = re.compile(r"answer\s+is[ \t]*:?[ \t]*", re.IGNORECASE)


class GoldAnswerError(ValueError):
    """A dataset answer without a readable ``#### N``."""


def _binary_minus(text: str, at: int, spaced: bool) -> bool:
    """Whether the sign at ``at`` subtracts from what stands before it: a sign touching its digits ("-5") does
    so only right after a word, digit or bracket ("5-3"); a sign spaced from them ("- 30") after one, spaces
    between ("5 - 3", "a year - 30%"). At the start, or after "=", ":" or "(", it is a negative sign."""
    before = text[:at].rstrip(" \t") if spaced else text[:at]
    return bool(before) and (before[-1].isalnum() or before[-1] in ")]%")


def _numbers(text: str) -> list[Decimal]:
    found = []
    for m in _NUMBER.finditer(text):
        digits = m.group("num").replace(",", "")
        negative = bool(m.group("sign") or m.group("sign2"))
        if m.group("sign") and _binary_minus(text, m.start(), spaced=text[m.end("sign")].isspace()):
            negative = bool(m.group("sign2"))  # "5-3", "a year - 30%": a subtraction, not a negative number
        if m.start("num") > 0 and text[m.start("num") - 1].isalpha():
            continue  # part of a word or identifier ("x2", "GPT4"), not a quantity
        try:
            value = Decimal(digits)
        except InvalidOperation:  # pragma: no cover - the pattern only matches decimal literals
            continue
        found.append(value.copy_negate() if negative else value)  # exact: unary minus rounds to 28 digits
    return found


def first_number(text: str) -> Decimal | None:
    nums = _numbers(text)
    return nums[0] if nums else None


def last_number(text: str) -> Decimal | None:
    nums = _numbers(text)
    return nums[-1] if nums else None


def gold_answer(answer: str) -> Decimal:
    """The number after the final ``####`` of a GSM8K ``answer`` field."""
    if "####" not in answer:
        raise GoldAnswerError(f"no '####' in gold answer {answer[-80:]!r}")
    value = first_number(answer.rsplit("####", 1)[1])
    if value is None:
        raise GoldAnswerError(f"no number after '####' in gold answer {answer[-80:]!r}")
    return value


def _number_after(output: str, start: int) -> Decimal | None:
    """The first number starting within 40 characters of ``start`` on its line, read to its last digit
    however long it is (the window grows over a number it cuts, so the cost stays that number's length)."""
    end = min(start + 40, len(output))
    while end < len(output) and (output[end].isdecimal() or output[end] in ",."):
        end += 1
    return first_number(output[start:end].split("\n", 1)[0])


def extract_prediction(output: str) -> tuple[Decimal | None, str]:
    """(value, how) where how is "####", "answer-is", "last-number" or "invalid"."""
    for m in _HASHES.finditer(output):
        value = _number_after(output, m.end())
        if value is not None:
            return value, "####"
    matches = list(_THE_ANSWER_IS.finditer(output))
    for m in reversed(matches):
        value = _number_after(output, m.end())
        if value is not None:
            return value, "answer-is"
    value = last_number(output)
    if value is not None:
        return value, "last-number"
    return None, "invalid"


def same_number(a: Decimal | None, b: Decimal | None) -> bool:
    return a is not None and b is not None and a == b


def format_number(value: Decimal | None) -> str | None:
    """A canonical string for JSON: integers without exponent or trailing zeros, decimals without trailing
    zeros. Exact at any length: it formats the digits themselves, never through a context's precision
    (``quantize``/``normalize`` round or raise past 28 digits, and real models write longer numbers)."""
    if value is None:
        return None
    if not value.is_finite():  # pragma: no cover - the pattern only matches finite decimal literals
        return str(value)
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
