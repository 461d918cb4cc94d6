"""The streaming-entry wrapper of openai-abort-status, in-process: what it does to the SSE generator.

``streaming_response_with_http_status`` wraps upstream's ``_handle_streaming_request``. Here the
wrapped original is a stand-in that returns what upstream's returns (a Starlette
``StreamingResponse`` over an SSE generator); the generator is instrumented so the tests can see
how far it was consumed and whether it ran to its end or was left suspended. The error response
is built by upstream's own ``OpenAIServingBase.create_error_response``.
"""

from __future__ import annotations

import asyncio
import json
import types

import pytest
from starlette.responses import StreamingResponse

from sglang_overlay.patches.openai_abort_status.streaming import streaming_response_with_http_status

ERROR = 'data: {"error": {"object": "error", "message": "queue full", "type": "SERVICE_UNAVAILABLE", "param": null, "code": 503}}\n\n'
USAGE = 'data: {"usage": {"prompt_tokens": 1, "completion_tokens": 0}}\n\n'
TOKEN = 'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'
DONE = "data: [DONE]\n\n"


class SSE:
    """An instrumented SSE generator: ``taken`` chunks handed out, ``state`` how it ended."""

    def __init__(self, chunks):
        self.chunks, self.taken, self.state = chunks, 0, "suspended"

    async def events(self):
        try:
            for chunk in self.chunks:
                self.taken += 1
                yield chunk
            self.state = "ran to its end"
        except GeneratorExit:
            self.state = "closed early"
            raise


def serving():
    from sglang.srt.entrypoints.openai.serving_base import OpenAIServingBase

    obj = types.SimpleNamespace()
    obj.create_error_response = types.MethodType(OpenAIServingBase.create_error_response, obj)
    return obj


SERVING = serving()


CALLS = []  # what the wrapped original was called with


def wrap(sse: SSE, drain: bool = False, response=None):
    """Run the wrapper on one event loop; returns (response, sse.taken when it returned, the
    chunks a client then reads, or None without ``drain``)."""

    async def original(self, adapted_request, request, raw_request):
        CALLS.append((self, adapted_request, request, raw_request))
        return response if response is not None else StreamingResponse(sse.events(), media_type="text/event-stream")

    async def run():
        CALLS.clear()
        response = await streaming_response_with_http_status(original, SERVING, "adapted", "request", "raw")
        taken = sse.taken
        body = [chunk async for chunk in response.body_iterator] if drain else None
        assert CALLS == [(SERVING, "adapted", "request", "raw")]  # the original got every argument
        return response, taken, body

    return asyncio.run(run())


def test_an_error_first_event_becomes_the_http_status_and_the_stream_runs_to_its_end():
    sse = SSE([ERROR, USAGE, DONE])
    response, _, _ = wrap(sse)
    assert response.status_code == 503
    assert json.loads(response.body) == {"object": "error", "message": "queue full", "type": "503", "param": None,
                                         "code": 503}  # fmt: skip
    # upstream's generator finished (its tail, [DONE], consumed), not left suspended for the GC
    assert (sse.taken, sse.state) == (3, "ran to its end")


def test_a_normal_first_event_is_passed_on_and_nothing_more_is_read_before_the_response():
    sse = SSE([TOKEN, TOKEN, USAGE, DONE])
    response, taken, body = wrap(sse, drain=True)
    assert isinstance(response, StreamingResponse) and taken == 1  # only the first chunk, peeked
    assert body == [TOKEN, TOKEN, USAGE, DONE]
    assert sse.state == "ran to its end"


def test_switched_off_the_stream_is_untouched(monkeypatch):
    monkeypatch.setenv("SGLANG_OVERLAY_ABORT_HTTP_STATUS", "0")
    sse = SSE([ERROR, USAGE, DONE])
    response, taken, body = wrap(sse, drain=True)
    assert isinstance(response, StreamingResponse) and taken == 0
    assert body == [ERROR, USAGE, DONE]


@pytest.mark.parametrize("first", ['data: {"error": {"code": 302}}\n\n', 'data: {"error": "x"}\n\n', "event: ping\n\n"])
def test_a_first_event_that_is_not_an_error_status_is_passed_on(first):
    sse = SSE([first, DONE])
    response, _, body = wrap(sse, drain=True)
    assert isinstance(response, StreamingResponse) and body == [first, DONE]


def error_event(code: int, message: str | None) -> str:
    error = {"object": "error", "type": "X", "param": None, "code": code}
    if message is not None:
        error["message"] = message
    return "data: " + json.dumps({"error": error}) + "\n\n"


@pytest.mark.parametrize(
    "code, message, shown", [(400, "bad", "bad"), (429, None, "Generation aborted."), (500, "", "Generation aborted.")]
)
def test_every_error_status_from_400_up_becomes_the_http_status(code, message, shown):
    response, _, _ = wrap(SSE([error_event(code, message), DONE]))
    assert response.status_code == code
    assert json.loads(response.body) == {"object": "error", "message": shown, "type": str(code), "param": None,
                                         "code": code}  # fmt: skip


@pytest.mark.parametrize(
    "first",
    [
        'data: {"choices": [], "error": {"code": 503, "message": "x"}}\n\n',  # not an error event (no prefix)
        b'data: {"error": {"code": 503, "message": "x"}}\n\n',  # bytes: upstream's events are str
    ],
)
def test_only_upstreams_error_events_count(first):
    response, _, body = wrap(SSE([first, DONE]), drain=True)
    assert isinstance(response, StreamingResponse) and body == [first, DONE]


def test_a_response_without_a_body_iterator_is_returned_as_is():
    """Upstream's own error answer (ValueError at the kick-start: an ORJSONResponse)."""
    from fastapi.responses import ORJSONResponse

    answer = ORJSONResponse({"object": "error", "code": 400}, status_code=400)
    response, _, _ = wrap(SSE([]), response=answer)
    assert response is answer
