"""AROUND the OpenAI routes' ``_handle_streaming_request`` (every release): an error before the first
SSE chunk becomes an HTTP error status with an OpenAI error body.

Job: look at the first SSE event (already produced before HTTP 200 is sent); an error event fails the
request with its status. Invariant: later chunks and other callers of the SSE generators (the Anthropic
``/v1/messages`` handler) keep upstream's behaviour; ``SGLANG_OVERLAY_ABORT_HTTP_STATUS=0`` turns it off.
Cost: one look at the first chunk, already in memory; nothing per later chunk.
"""

from __future__ import annotations

import json

from sglang_overlay.patches.openai_abort_status import settings

__all__ = ["streaming_response_with_http_status"]

_ERROR_EVENT_PREFIX = 'data: {"error"'


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
