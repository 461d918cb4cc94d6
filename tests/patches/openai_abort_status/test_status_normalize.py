"""normalize_abort_status: every abort status code the OpenAI layer can receive.

In-process and fast: the normalization imports neither torch nor sglang. The
expected statuses are written out here, not computed by the code under test.
"""

import math
from http import HTTPStatus

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_overlay.patches.openai_abort_status.status import normalize_abort_status, normalize_finish_reason
from tests.support.abort_scripts import ABORT_CODES, BAD_REQUEST_KEYS, EXPECTED_STATUS, QueueStatus

S = HTTPStatus
EXPECTED = EXPECTED_STATUS


def test_the_table_covers_every_scripted_code():
    assert set(EXPECTED) | set(BAD_REQUEST_KEYS) == set(ABORT_CODES)


@pytest.mark.parametrize("key", BAD_REQUEST_KEYS)
def test_400_codes(key):
    assert normalize_abort_status(ABORT_CODES[key]) == (S.BAD_REQUEST, None)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_issue_codes(key):
    status, shown = EXPECTED[key]
    result = normalize_abort_status(ABORT_CODES[key])
    assert result.status is status or result.status == status
    assert type(result.status) is (HTTPStatus if status is not None else type(None))
    if shown is None:
        assert result.note is None
    else:
        assert shown in result.note and "500" in result.note


@pytest.mark.parametrize(
    "value, status",
    [
        (np.int32(429), S.TOO_MANY_REQUESTS),
        (np.uint16(500), S.INTERNAL_SERVER_ERROR),
        (np.float64(502.0), S.BAD_GATEWAY),
        ("\t404\n", S.NOT_FOUND),
        (b" 503 ", S.SERVICE_UNAVAILABLE),
        (QueueStatus.QUEUE_FULL, S.TOO_MANY_REQUESTS),
        (S.BAD_REQUEST, S.BAD_REQUEST),
        (400, S.BAD_REQUEST),
    ],
)
def test_more_int_likes(value, status):
    assert normalize_abort_status(value) == (status, None)


@pytest.mark.parametrize(
    "value",
    [S.OK, 200, 302, "200", False, np.bool_(True), float("nan"), float("inf"), -503, "-503", "5 03", "",
     "٥٠٣", [503], {"code": 503}, 1e300, 10**100],
)  # fmt: skip
def test_not_an_error_status_becomes_500_with_the_value_in_the_note(value):
    result = normalize_abort_status(value)
    assert result.status is S.INTERNAL_SERVER_ERROR
    assert "reported as 500" in result.note


class HostileRepr:
    def __repr__(self):
        raise RuntimeError("no repr either")


@given(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(), st.binary(),
        st.sampled_from(list(HTTPStatus)), st.just(HostileRepr()), st.lists(st.integers(), max_size=2),
    )
)  # fmt: skip
def test_never_raises_and_always_answers_an_error_status_or_none(value):
    result = normalize_abort_status(value)
    if value is None:
        assert result.status is None
    else:
        assert isinstance(result.status, HTTPStatus) and result.status >= 400
        assert (result.note is None) == (
            not isinstance(value, bool) and isinstance(value, (int, float, str, bytes)) and _is_known_error_code(value)
        )


def _is_known_error_code(value) -> bool:
    try:
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                return False
            code = int(value)
        elif isinstance(value, (str, bytes)):
            text = (value.decode("ascii", "replace") if isinstance(value, bytes) else value).strip()
            if not (text.isascii() and text.isdigit()):
                return False
            code = int(text)
        else:
            code = int(value)
    except ValueError:
        return False
    return code >= 400 and code in {s.value for s in HTTPStatus}


def test_finish_reason_is_normalized_in_place_and_keeps_the_message():
    reason = {"type": "abort", "message": "queue full", "status_code": " 503 "}
    assert normalize_finish_reason(reason) is S.SERVICE_UNAVAILABLE
    assert reason == {"type": "abort", "message": "queue full", "status_code": S.SERVICE_UNAVAILABLE}
    reason = {"type": "abort", "message": "odd", "status_code": HostileRepr()}
    assert normalize_finish_reason(reason) is S.INTERNAL_SERVER_ERROR
    assert reason["message"].startswith("odd (abort status_code <HostileRepr object>")
    reason = {"type": "abort", "message": "client went away", "status_code": None}
    assert normalize_finish_reason(reason) is None and reason["message"] == "client went away"


class IndexOnly:
    """Neither numbers.Integral nor Real, but an integer through __index__ (as numpy-like scalars are)."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


def test_anything_with_index_is_its_integer():
    assert normalize_abort_status(IndexOnly(503)) == (S.SERVICE_UNAVAILABLE, None)
    assert normalize_abort_status(IndexOnly(599)).status is S.INTERNAL_SERVER_ERROR


class EvilClass:
    """A value that even isinstance() cannot look at (its __class__ raises)."""

    @property
    def __class__(self):
        raise RuntimeError("no class")

    def __repr__(self):
        return "<EvilClass>"


def test_a_value_that_cannot_be_inspected_becomes_500_with_a_note():
    reason = {"type": "abort", "message": "odd", "status_code": EvilClass()}
    assert normalize_finish_reason(reason) is S.INTERNAL_SERVER_ERROR
    assert reason == {"type": "abort", "status_code": S.INTERNAL_SERVER_ERROR,
                      "message": "odd (abort status_code unreadable; reported as 500)"}  # fmt: skip


def test_a_missing_message_gets_the_default_before_the_note():
    reason = {"type": "abort", "status_code": "abc"}
    normalize_finish_reason(reason)
    assert (
        reason["message"]
        == "Generation aborted. (abort status_code 'abc' is not an HTTP error status; reported as 500)"
    )


@pytest.mark.parametrize(
    "length, shown",
    [(80, "'" + "a" * 78 + "'"), (81, "'" + "a" * 76 + "..."), (82, "'" + "a" * 76 + "...")],
)
def test_long_values_are_cut_to_80_characters_in_the_note(length, shown):
    value = "a" * (length - 2)  # its repr adds the two quotes
    note = normalize_abort_status(value).note
    assert note == f"abort status_code {shown} is not an HTTP error status; reported as 500"
