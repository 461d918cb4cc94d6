"""Real scheduler-side error aborts, overlay and upstream side by side, through every OpenAI-compatible route.

The triggers are upstream's own (line numbers are 0.5.20's sglang/srt/managers/scheduler.py), reachable on
demand with the flags of ``server.ABORT_FLAGS`` and ``SGLANG_REQ_RUNNING_TIMEOUT=4``:

- ``priority``: ``Scheduler._set_or_validate_priority`` (scheduler.py:3229-3256): with
  ``--abort-on-priority-when-disabled`` a request carrying ``priority`` is refused with
  ``HTTPStatus.SERVICE_UNAVAILABLE`` ("Using priority is disabled for this server...") before any token.
  OpenAI routes only (the Anthropic request has no priority field).
- ``queue_full``: ``Scheduler._abort_on_queued_limit`` (scheduler.py:3258-3297): every running slot busy and
  ``--max-queued-requests`` reached, the incoming request is refused with 503 "The request queue is full.";
  the probe occupies the slots with real decoding requests (``probes.QueueFiller``).
- ``running_timeout``: ``Scheduler._poll_timeout_aborts`` (scheduler.py:3299-3353) emits an ``AbortReq``
  with an abort message, and ``abort_request`` (scheduler.py:5363-5369) finishes the running request with
  ``FINISH_ABORT(message, 503)``: a 503 AFTER tokens were streamed ("Request running timeout reached.").
  (The over-long input path, ``validate_input_length``, is a 400 that upstream already reports properly.)

Each cell sends the same request to each server and reduces what the client saw to an ``Outcome``.
The overlay cells assert the contract (README "openai-abort-status"): the real status and message,
as an HTTP error before the first chunk on OpenAI routes, as an SSE error event after it, and on
Anthropic ``/v1/messages`` upstream's typed ``overloaded_error`` with the real message. The upstream
cells pin what upstream 0.5.20 was observed to do (``UPSTREAM``), which is what the overlay fixes, with
what later pins changed of it (``UPSTREAM_CHANGES``: the tier runs on both pins).

FAILING-FIRST: ``overlay-msgpack-w2-*`` stream cells (tokenizer workers never loaded the overlay:
HTTP 200 + ``finish_reason: "abort"``) and ``messages`` stream ``queue_full`` cells (the overlay's SSE
wrapper raised HTTPException inside the generator the Anthropic handler consumes after HTTP 200:
``api_error`` "Internal server error").
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import time

import httpx
import pytest
from packaging.version import Version

from tests.e2e.conftest import (
    OVERLAY_MSGPACK,
    OVERLAY_MSGPACK_W2,
    OVERLAY_PICKLE_CLI,
    UPSTREAM_MSGPACK,
    UPSTREAM_PICKLE,
)
from tests.support.real_server.probes import QueueFiller, QueueLost, call, wait_idle
from tests.support.real_server.server import VENV_BIN

pytestmark = pytest.mark.e2e

# Tokenizer workers once, under msgpack (where the normalization and the streaming wrapper both run in the
# workers): a pickle-w2 column repeated the msgpack-w2 one's proof for 14 more cells and a launch (the wheel's
# session runs both codecs with workers, tests/e2e/test_02_tokenizer_workers.py).
CONFIGS = [
    OVERLAY_MSGPACK_W2,
    OVERLAY_MSGPACK,
    OVERLAY_PICKLE_CLI,
    UPSTREAM_PICKLE,
    UPSTREAM_MSGPACK,
]
MESSAGE = {"priority": "priority is disabled", "queue_full": "queue is full", "running_timeout": "running timeout"}
CASES = (
    [("priority", r, s) for r in ("completions", "chat") for s in (False, True)]
    + [("queue_full", r, s) for r in ("completions", "chat", "messages") for s in (False, True)]
    + [("running_timeout", r, True) for r in ("completions", "chat", "messages")]
    + [("running_timeout", "completions", False)]
)
LONG = 3500  # tokens: decoding runs well past the 4 s running timeout
QUEUE_TRIES = 10  # a try fills the queue in 0.5-2.7 s of the blockers' 4 s (measured, idle 2 cores)

# What upstream 0.5.20 gave for each cell (Outcome.brief()), observed on this tier's servers
# (key: ipc, trigger, route, stream). Losses: msgpack turns every streamed 503 into a graceful abort
# (Anthropic: a normal "ok" end), and non-stream /v1/messages reports a 503 as 500 api_error under both codecs.
UPSTREAM: dict[tuple, str] = {
    ("msgpack", "priority", "chat", False): "http_error 503",
    ("msgpack", "priority", "chat", True): "graceful_abort 200",
    ("msgpack", "priority", "completions", False): "http_error 503",
    ("msgpack", "priority", "completions", True): "graceful_abort 200",
    ("msgpack", "queue_full", "chat", False): "http_error 503",
    ("msgpack", "queue_full", "chat", True): "graceful_abort 200",
    ("msgpack", "queue_full", "completions", False): "http_error 503",
    ("msgpack", "queue_full", "completions", True): "graceful_abort 200",
    ("msgpack", "queue_full", "messages", False): "http_error 500 api_error",
    ("msgpack", "queue_full", "messages", True): "ok 200",
    ("msgpack", "running_timeout", "chat", True): "graceful_abort 200",
    ("msgpack", "running_timeout", "completions", False): "http_error 503",
    ("msgpack", "running_timeout", "completions", True): "graceful_abort 200",
    ("msgpack", "running_timeout", "messages", True): "ok 200",
    ("pickle", "priority", "chat", False): "http_error 503",
    ("pickle", "priority", "chat", True): "sse_error 200 code=503 first-event",
    ("pickle", "priority", "completions", False): "http_error 503",
    ("pickle", "priority", "completions", True): "sse_error 200 code=503 first-event",
    ("pickle", "queue_full", "chat", False): "http_error 503",
    ("pickle", "queue_full", "chat", True): "sse_error 200 code=503 first-event",
    ("pickle", "queue_full", "completions", False): "http_error 503",
    ("pickle", "queue_full", "completions", True): "sse_error 200 code=503 first-event",
    ("pickle", "queue_full", "messages", False): "http_error 500 api_error",
    ("pickle", "queue_full", "messages", True): "sse_error 200 overloaded_error first-event",
    ("pickle", "running_timeout", "chat", True): "sse_error 200 code=503 after-content",
    ("pickle", "running_timeout", "completions", False): "http_error 503",
    ("pickle", "running_timeout", "completions", True): "sse_error 200 code=503 after-content",
    ("pickle", "running_timeout", "messages", True): "sse_error 200 overloaded_error after-content",
}
# What later releases changed of that, observed on this tier's servers, by the release that changed it:
# 0.5.23 reports the non-stream /v1/messages 503 as Anthropic's typed overloaded_error (both codecs).
UPSTREAM_CHANGES: dict[str, dict[tuple, str]] = {
    "0.5.23": {
        (ipc, "queue_full", "messages", False): "http_error 503 overloaded_error" for ipc in ("pickle", "msgpack")
    },
}
_INSTALLED = Version(importlib.metadata.version("sglang"))
for _release, _changes in UPSTREAM_CHANGES.items():
    if _INSTALLED >= Version(_release):
        UPSTREAM.update(_changes)

OBSERVED: dict[tuple, str] = {}


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: c.name)
def server(request, server_pool):
    return server_pool.get(request.param)


def fire(server, trigger: str, route: str, stream: bool):
    if trigger == "priority":
        return call(server.url, route, stream, priority=1)
    if trigger == "running_timeout":
        extra = {} if route == "messages" else {"ignore_eos": True}
        return call(server.url, route, stream, max_tokens=LONG, **extra)
    misses = []  # a blocker that ends early (the 4 s running timeout) frees a slot: the cell is repeated, never judged
    for _ in range(QUEUE_TRIES):
        start = time.monotonic()
        try:
            with QueueFiller(server.url) as filler:
                outcome = call(server.url, route, stream)
                if filler.still_full():
                    return outcome
                misses.append(f"a blocker ended {time.monotonic() - start:.1f} s into the try")
        except QueueLost as exc:
            misses.append(f"{exc} ({time.monotonic() - start:.1f} s)")
    pytest.fail(f"could not keep the queue full while the request was sent ({QUEUE_TRIES} tries): {misses}")


def expected_overlay(trigger: str, route: str, stream: bool) -> str | None:
    """The overlay's contract; None: keep upstream's (pickle) outcome exactly (do no harm beside the fix)."""
    if not stream:
        return None if route == "messages" else "http_error 503"
    where = "after-content" if trigger == "running_timeout" else "first-event"
    if route == "messages":
        return f"sse_error 200 overloaded_error {where}"
    if trigger == "running_timeout":
        return "sse_error 200 code=503 after-content"
    return "http_error 503"


@pytest.mark.parametrize("trigger,route,stream", CASES, ids=lambda v: str(v).lower())
def test_abort_cell(server, trigger, route, stream):
    outcome = fire(server, trigger, route, stream)
    key = (server.config.name, trigger, route, stream)
    OBSERVED[key] = outcome.brief()
    if server.config.overlay:
        want = expected_overlay(trigger, route, stream)
        got = outcome.brief()
        if want is None:  # upstream's non-stream /v1/messages outcome (its pickle cell), unchanged by the overlay
            assert got == UPSTREAM[("pickle", trigger, route, stream)], f"{key}: {got!r} differs from upstream"
            return
        assert got == want, (
            f"{key}: got {outcome.brief()!r} ({outcome.message!r}), want {want!r}\n{outcome.raw[-1500:]}"
        )
        assert MESSAGE[trigger] in outcome.message.lower(), f"{key}: lost the real message: {outcome.message!r}"
        if outcome.kind == "sse_error" and route != "messages":
            assert outcome.done, f"{key}: no data: [DONE] after the error event"
    else:
        pinned = UPSTREAM.get((server.config.ipc, trigger, route, stream))
        assert pinned is not None, f"no pinned upstream outcome for {key}: observed {outcome.brief()!r}"
        assert outcome.brief() == pinned, f"{key}: upstream gave {outcome.brief()!r}, pinned {pinned!r}"


def test_no_request_state_left_and_healthy(server):
    load = wait_idle(server.url, timeout=30)
    assert load["running"] == 0 and load["queued"] == 0, load
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200


def test_status_command_exit_code_matches_the_overlay(server):
    result = subprocess.run(
        [str(VENV_BIN / "sglang-overlay"), "status", "--url", server.url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(result.stdout)
    if server.config.overlay:
        assert result.returncode == 0 and report["ok"], result.stdout
    else:  # pure upstream: the schedulers and the HTTP process lack it
        assert result.returncode == 1 and report["ok"] is False, result.stdout
        assert not any(p["overlay"] for p in report["processes"])


def teardown_module(module):
    if OBSERVED:
        print("\n[e2e] abort matrix (config, trigger, route, stream) -> outcome")
        for key in sorted(OBSERVED, key=str):
            print(f"  {key}: {OBSERVED[key]}")
