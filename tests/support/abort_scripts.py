"""Scripts for ``tests/support/scripted_server.py`` used by the abort-status tests.

A script runs in the server process: ``fn(prompt_text, request_json) -> steps``.
Abort status codes that JSON cannot carry (numpy integers, IntEnum members,
objects whose ``int()`` raises) are picked by name from ``ABORT_CODES``; the
prompt says which one and when, e.g. ``"abort=np_503 after=2"``.
"""

from __future__ import annotations

import enum
from http import HTTPStatus

import numpy as np


class QueueStatus(enum.IntEnum):
    """A component's own IntEnum of HTTP-like codes (not HTTPStatus)."""

    QUEUE_FULL = 429


class Unconvertible:
    """An abort code whose int() raises."""

    def __int__(self):
        raise RuntimeError("this status object cannot be converted")

    def __index__(self):
        raise RuntimeError("this status object cannot be converted")

    def __repr__(self):
        return "<Unconvertible status>"


ABORT_CODES = {
    "httpstatus_503": HTTPStatus.SERVICE_UNAVAILABLE,
    "int_503": 503,
    "np_503": np.int64(503),
    "str_503": "503",
    "str_429_spaces": " 429 ",
    "float_503": 503.0,
    "intenum_429": QueueStatus.QUEUE_FULL,
    "none": None,
    "bool_true": True,
    "neg_1": -1,
    "zero": 0,
    "unknown_599": 599,
    "float_503_5": 503.5,
    "str_abc": "abc",
    "unconvertible": Unconvertible(),
    # 400 keeps upstream's own bad-request path (a ValueError): tested apart from the matrix
    "httpstatus_400": HTTPStatus.BAD_REQUEST,
    "int_400": 400,
    "str_400": "400",
}

# What the patched server must answer for each code (status; the original value as the
# message shows it when the code was unusable and reported as 500). Written out by hand.
_S = HTTPStatus
EXPECTED_STATUS = {
    "httpstatus_503": (_S.SERVICE_UNAVAILABLE, None),
    "int_503": (_S.SERVICE_UNAVAILABLE, None),
    "np_503": (_S.SERVICE_UNAVAILABLE, None),
    "str_503": (_S.SERVICE_UNAVAILABLE, None),
    "str_429_spaces": (_S.TOO_MANY_REQUESTS, None),
    "float_503": (_S.SERVICE_UNAVAILABLE, None),
    "intenum_429": (_S.TOO_MANY_REQUESTS, None),
    "none": (None, None),
    "bool_true": (_S.INTERNAL_SERVER_ERROR, "True"),
    "neg_1": (_S.INTERNAL_SERVER_ERROR, "-1"),
    "zero": (_S.INTERNAL_SERVER_ERROR, "0"),
    "unknown_599": (_S.INTERNAL_SERVER_ERROR, "599"),
    "float_503_5": (_S.INTERNAL_SERVER_ERROR, "503.5"),
    "str_abc": (_S.INTERNAL_SERVER_ERROR, "'abc'"),
    "unconvertible": (_S.INTERNAL_SERVER_ERROR, "<Unconvertible status>"),
}

# 400 stays on upstream's own bad-request path (ValueError; OpenAI type "BadRequestError"): tested apart.
BAD_REQUEST_KEYS = ("httpstatus_400", "int_400", "str_400")

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def _params(prompt_text: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in prompt_text.split() if "=" in tok)


def hello(prompt_text: str, request: dict) -> list[dict]:
    """Three words, normal finish."""
    return [{"text": "hello there general kenobi"}]


def slow(prompt_text: str, request: dict) -> list[dict]:
    """A first chunk, then a long wait: for client-disconnect tests."""
    return [{"text": "first words"}, {"sleep": 30}, {"text": "never sent"}]


def abort_case(prompt_text: str, request: dict) -> list[dict]:
    """``abort=<ABORT_CODES key> after=<words before the abort> [wait=<s>] [via=abort_req]``.

    ``after=0`` aborts before any token (the error arrives before the first chunk).
    With words, the script waits ``wait`` seconds (default 0.05) after them so the
    first chunk reaches the client before the abort. ``via=abort_req``: the abort comes
    as the scheduler's AbortReq echo (timeouts) instead of a finished batch output.
    """
    p = _params(prompt_text)
    code = ABORT_CODES[p["abort"]]
    after = int(p.get("after", "0"))
    steps: list[dict] = []
    if after:
        steps.append({"text": " ".join(WORDS[:after]) + " "})
        steps.append({"sleep": float(p.get("wait", "0.05"))})
    elif "delay" in p:
        steps.append({"sleep": float(p["delay"])})
    steps.append({"abort": code, "message": f"scripted abort {p['abort']}", "via": p.get("via", "output")})
    return steps


def paced(prompt_text: str, request: dict) -> list[dict]:
    """``pace=<s>``: two pieces of text with a pause between them, normal finish."""
    pause = float(_params(prompt_text)["pace"])
    return [{"text": "alpha beta "}, {"sleep": pause}, {"text": "gamma delta"}]


def dispatch(prompt_text: str, request: dict) -> list[dict]:
    """One server, many behaviours: ``abort=`` aborts, ``pace=`` paces, ``slow`` stalls, else ``hello``.

    ``gate=<n>`` first holds the request until ``n`` requests were live at once.
    """
    gate = [{"gate": int(_params(prompt_text)["gate"])}] if "gate=" in prompt_text else []
    if "abort=" in prompt_text:
        return gate + abort_case(prompt_text, request)
    if "pace=" in prompt_text:
        return gate + paced(prompt_text, request)
    if "slow" in prompt_text.split():
        return slow(prompt_text, request)
    return hello(prompt_text, request)
