"""openai-abort-status: abort status codes become proper HTTP errors on the OpenAI paths.

An abort reaches the HTTP process as a finish reason ``{"type": "abort",
"status_code": ..., "message": ...}``. Upstream 0.5.20 treats it as an error only
when ``status_code`` is an ``HTTPStatus`` (streaming) or equals 400/500/503
(non-streaming); a plain ``503`` from a component that serialized the enum, a
string ``"503"`` or a ``429`` becomes a *graceful* ``finish_reason: "abort"`` with
HTTP 200, and the client retries nothing.

This module holds the one normalization (:func:`normalize_abort_status`) and the
hooks that apply it:

* ``TokenizerManager._handle_abort_finish_reason`` (AROUND): the choke point
  every finished output of every request passes before any handler reads it.
  The code is normalized in place there; every error status (not only 500/503)
  then releases the request state like upstream's 500/503 branch and, on the
  non-streaming path, raises ``HTTPException`` with that status.
* ``OpenAIServingChat._generate_chat_stream`` and
  ``OpenAIServingCompletion._generate_completion_stream`` (AROUND): when the very
  first SSE event of a stream is an error (the abort came before any token),
  the request fails with that HTTP status and an OpenAI error body instead of
  HTTP 200 plus an in-band error. ``SGLANG_OVERLAY_ABORT_HTTP_STATUS=0`` keeps
  upstream's in-band event. After the first chunk the in-band error event
  (then usage when asked for, then ``data: [DONE]``) is upstream's own code,
  which works once the code is an ``HTTPStatus``.
"""

from __future__ import annotations

import json
import numbers
import operator
from http import HTTPStatus
from typing import NamedTuple

from sglang_overlay.patches.openai_abort_status import settings

_KNOWN = frozenset(int(s) for s in HTTPStatus)
_ERROR_EVENT_PREFIX = 'data: {"error"'


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


# --------------------------------------------------------------------------- hooks


async def handle_abort_finish_reason(original, self, out: dict, state, is_stream: bool):
    """AROUND ``TokenizerManager._handle_abort_finish_reason``: normalize, then treat every
    error status like upstream treats 500/503 (400 keeps upstream's ValueError path)."""
    finish_reason = out["meta_info"]["finish_reason"]
    if finish_reason.get("type") != "abort":
        return await original(self, out, state, is_stream)
    status = normalize_finish_reason(finish_reason)
    if status is None or status == HTTPStatus.BAD_REQUEST:
        return await original(self, out, state, is_stream)

    # Upstream's 500/503 branch, for every error status: release the state, then raise or yield.
    if state.obj.rid in self.rid_to_state:
        del self.rid_to_state[state.obj.rid]
    if self.enable_lora and state.obj.lora_path:
        await self.lora_registry.release(state.obj.lora_id)
    if not is_stream:
        from fastapi import HTTPException

        raise HTTPException(status_code=int(status), detail=finish_reason["message"])
    return out


def _error_event(chunk) -> dict | None:
    """The OpenAI error object of an SSE error event (``create_streaming_error_response``)."""
    if not isinstance(chunk, str) or not chunk.startswith(_ERROR_EVENT_PREFIX):
        return None
    try:
        error = json.loads(chunk[len("data: ") :])["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return error if isinstance(error, dict) and isinstance(error.get("code"), int) else None


async def stream_with_http_status(original, self, adapted_request, request, raw_request):
    """AROUND the chat/completion SSE generators: an error as the first event becomes the
    request's HTTP status (``handle_request`` turns the HTTPException into an OpenAI error body)."""
    events = original(self, adapted_request, request, raw_request)
    try:
        first = await events.__anext__()
        error = _error_event(first)
        if error is not None and error["code"] >= 400 and settings.abort_http_status():
            from fastapi import HTTPException

            raise HTTPException(status_code=error["code"], detail=error.get("message") or "Generation aborted.")
        yield first
        async for event in events:
            yield event
    finally:
        await events.aclose()
