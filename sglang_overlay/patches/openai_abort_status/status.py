"""Abort status normalisation: any ``status_code`` an abort carries becomes an ``HTTPStatus`` or None.

Job: :func:`normalize_abort_status` (the one mapping) and :func:`normalize_finish_reason` (in place, with a
note in the message when an unusable code is reported as 500). Invariant: never raises; an abort is never a
success (1xx-3xx and unknown codes become 500). Cost: a few type checks; imports neither torch nor sglang.
"""

from __future__ import annotations

import numbers
import operator
from http import HTTPStatus
from typing import NamedTuple

__all__ = ["AbortStatus", "normalize_abort_status", "normalize_finish_reason"]

_KNOWN = frozenset(int(s) for s in HTTPStatus)


class AbortStatus(NamedTuple):
    """A normalized abort code: ``status`` is None for a graceful abort; ``note``
    says why an unusable code was reported as 500 (None when it was usable)."""

    status: HTTPStatus | None
    note: str | None = None


def _safe_repr(value) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"
    return text if len(text) <= 80 else text[:77] + "..."


def _as_int(value) -> int | None:
    """The integer an int-like value stands for; None when it stands for none."""
    if isinstance(value, bool):  # True is not 1 here (numpy bools have no __index__: TypeError below)
        return None
    if isinstance(value, (str, bytes)):
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        text = text.strip()
        return int(text) if text.isascii() and text.isdigit() else None
    if isinstance(value, numbers.Integral):  # int, IntEnum, numpy integers
        return operator.index(value)
    if isinstance(value, numbers.Real):  # float, numpy floating: integral values only
        as_float = float(value)
        return int(as_float) if as_float.is_integer() else None
    return operator.index(value)  # anything else with __index__; TypeError otherwise


def normalize_abort_status(value) -> AbortStatus:
    """Map any abort ``status_code`` to an ``HTTPStatus`` (or None). Never raises.

    HTTPStatus stays; ints and int-likes (IntEnum, numpy integers, integral floats,
    digit strings with surrounding spaces) become the matching HTTPStatus; None
    stays None (graceful abort). Booleans, non-integral floats, negative numbers,
    codes that are not HTTP error statuses (unknown ones such as 0 or 599, and
    1xx-3xx: an abort is never a success) and unparseable values become 500
    Internal Server Error, with the original value in ``note``.
    """
    if value is None:
        return AbortStatus(None)
    if isinstance(value, HTTPStatus) and value >= 400:
        return AbortStatus(value)
    try:
        code = _as_int(value)
    except Exception:
        code = None
    if code is not None and code >= 400 and code in _KNOWN:
        return AbortStatus(HTTPStatus(code))
    return AbortStatus(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        f"abort status_code {_safe_repr(value)} is not an HTTP error status; reported as 500",
    )


def normalize_finish_reason(finish_reason: dict) -> HTTPStatus | None:
    """Normalize an abort finish reason in place; returns its status (None: graceful)."""
    try:
        result = normalize_abort_status(finish_reason.get("status_code"))
    except Exception:  # never raises: even a hostile __eq__/__hash__ ends as a 500
        result = AbortStatus(HTTPStatus.INTERNAL_SERVER_ERROR, "abort status_code unreadable; reported as 500")
    finish_reason["status_code"] = result.status
    if result.note:
        message = finish_reason.get("message") or "Generation aborted."
        finish_reason["message"] = f"{message} ({result.note})"
    return result.status
