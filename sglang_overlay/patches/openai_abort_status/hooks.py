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
* ``OpenAIServingChat._handle_streaming_request`` and
  ``OpenAIServingCompletion._handle_streaming_request`` (AROUND), the OpenAI
  routes' own streaming entry: when the very first SSE event of a stream is an
  error (the abort came before any token), the request fails with that HTTP
  status and an OpenAI error body instead of HTTP 200 plus an in-band error.
  ``SGLANG_OVERLAY_ABORT_HTTP_STATUS=0`` keeps upstream's in-band event. The SSE
  generators themselves stay upstream's, so every other caller of them (the
  Anthropic ``/v1/messages`` handler) keeps upstream's behaviour, with the code
  now an ``HTTPStatus``: typed Anthropic errors. After the first chunk the
  in-band error event (then usage when asked for, then ``data: [DONE]``) is
  upstream's own code.

Invariants: a finish reason is normalized once, in place; request state and a
LoRA reference are released once. Cost: one normalization per finished output,
one look at the first SSE chunk per streaming OpenAI request.
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


# --- LoRA: exactly one release per request (issue 12) -----------------------------------------------
def _lora_release_owed(manager, out: dict, state) -> bool:
    """Whether this finished abort still holds its LoRA reference.

    Upstream 0.5.20 has two producers of a finished output. ``_handle_batch_output`` releases
    the reference itself when the request finishes, and its meta_info always carries
    ``prompt_tokens``; the scheduler's abort echo (``_handle_abort_req``: timeouts, aborts in
    the waiting queue) builds its output without ``prompt_tokens`` and releases nothing, so
    the reference is released here for every abort status that path brings (upstream's own
    500/503 branch releases it again after ``_handle_batch_output``: a double release).
    """
    return bool(manager.enable_lora and state.obj.lora_path) and "prompt_tokens" not in out["meta_info"]
# --- end LoRA ---------------------------------------------------------------------------------------


async def handle_abort_finish_reason(original, self, out: dict, state, is_stream: bool):
    """AROUND ``TokenizerManager._handle_abort_finish_reason``: normalize, then treat every
    error status like upstream treats 500/503 (400 keeps upstream's ValueError path)."""
    finish_reason = out["meta_info"]["finish_reason"]
    if finish_reason.get("type") != "abort":
        return await original(self, out, state, is_stream)
    status = normalize_finish_reason(finish_reason)
    # --- LoRA: exactly one release per request, for every status (issue 12) ---------------------
    if _lora_release_owed(self, out, state):
        await self.lora_registry.release(state.obj.lora_id)
    # --- end LoRA ---------------------------------------------------------------------------------
    if status is None or status == HTTPStatus.BAD_REQUEST:
        return await original(self, out, state, is_stream)

    # Upstream's 500/503 branch, for every error status: release the state, then raise or yield
    # (the LoRA reference was settled above).
    if state.obj.rid in self.rid_to_state:
        del self.rid_to_state[state.obj.rid]
    if not is_stream:
        from fastapi import HTTPException

        raise HTTPException(status_code=int(status), detail=finish_reason["message"])
    return out


async def normalize_then_upstream(original, self, out: dict, state, is_stream: bool):
    """AROUND ``TokenizerManager._handle_abort_finish_reason`` on sglang >= 0.5.23: normalize an abort's
    status code in place, then upstream decides.

    0.5.23 treats every code in 400-599 as an error and releases LoRA once (``_release_lora_once``), but
    compares the raw code (``"503"`` raises ``TypeError`` there) and its streaming handlers test
    ``isinstance(code, HTTPStatus)``, which a msgpack-delivered int fails. After normalization the code
    is an ``HTTPStatus`` or ``None``, so both read it right; nothing else of upstream's branch is
    repeated here (no release, no ``rid_to_state`` edit). Cost: one dict read for a non-abort output."""
    finish_reason = out["meta_info"]["finish_reason"]
    if finish_reason.get("type") == "abort":
        normalize_finish_reason(finish_reason)
    return await original(self, out, state, is_stream)


def _error_event(chunk) -> dict | None:
    """The OpenAI error object of an SSE error event (``create_streaming_error_response``)."""
    if not isinstance(chunk, str) or not chunk.startswith(_ERROR_EVENT_PREFIX):
        return None
    try:
        error = json.loads(chunk[len("data: ") :])["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return error if isinstance(error, dict) and isinstance(error.get("code"), int) else None


async def streaming_response_with_http_status(original, self, adapted_request, request, raw_request):
    """AROUND ``OpenAIServingChat/OpenAIServingCompletion._handle_streaming_request`` (the OpenAI
    routes only): when the first SSE event, which upstream's kick-start has already produced before
    HTTP 200 is sent, is an error, the request fails with that HTTP status and an OpenAI error body.

    Upstream's Anthropic ``/v1/messages`` handler iterates ``_generate_chat_stream`` itself and never
    passes here, so it keeps its typed error events (``overloaded_error``, ``rate_limit_error``).
    Cost: one look at the first chunk, already in memory; nothing per later chunk.
    """
    response = await original(self, adapted_request, request, raw_request)
    events = getattr(response, "body_iterator", None)
    if events is None or not settings.abort_http_status():  # an error response, or the switch is off
        return response
    first = await events.__anext__()
    error = _error_event(first)
    if error is None or error["code"] < 400:
        response.body_iterator = _prepend(first, events)
        return response
    async for _ in events:  # the aborted stream's tail ([DONE]): finish it so upstream's generator ends
        pass
    message = error.get("message") or "Generation aborted."
    return self.create_error_response(message=message, err_type=str(error["code"]), status_code=error["code"])


async def _prepend(first, events):
    yield first
    async for event in events:
        yield event
