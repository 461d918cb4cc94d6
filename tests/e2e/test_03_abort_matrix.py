"""Real scheduler-side error aborts, overlay and upstream side by side, through every OpenAI-compatible route.

The triggers are upstream's own (line numbers are 0.5.23's sglang/srt/managers/scheduler.py), reachable on
demand with the flags of ``server.ABORT_FLAGS`` and ``SGLANG_REQ_RUNNING_TIMEOUT=4``:

- ``priority``: ``Scheduler._set_or_validate_priority`` (scheduler.py:3520-3543): with
  ``--abort-on-priority-when-disabled`` a request carrying ``priority`` is refused with
  ``HTTPStatus.SERVICE_UNAVAILABLE`` ("Using priority is disabled for this server...") before any token.
  OpenAI routes only (the Anthropic request has no priority field).
- ``queue_full``: ``Scheduler._abort_on_queued_limit`` (scheduler.py:3552-3596): every running slot busy and
  ``--max-queued-requests`` reached, the incoming request is refused with 503 "The request queue is full.";
  the probe occupies the slots with real decoding requests (``probes.QueueFiller``).
- ``running_timeout``: ``Scheduler._poll_timeout_aborts`` (scheduler.py:3598-3651) emits an ``AbortReq``
  with an abort message, and ``abort_request`` (scheduler.py:5806-5810) finishes the running request with
  ``FINISH_ABORT(message, 503)``: a 503 AFTER tokens were streamed ("Request running timeout reached.").
  (The over-long input path, ``validate_input_length``, is a 400 that upstream already reports properly.)

Each cell sends the same request to each server and reduces what the client saw to an ``Outcome``.
The overlay cells assert the contract (README "openai-abort-status"): the real status and message,
as an HTTP error before the first chunk on OpenAI routes, as an SSE error event after it, and on
Anthropic ``/v1/messages`` upstream's typed ``overloaded_error`` with the real message. The upstream
cells pin what upstream 0.5.23 was observed to do (``aborts.UPSTREAM``), which is what the overlay fixes, with
what other releases change of it keyed by the serving release folder (``UPSTREAM_CHANGES``).

FAILING-FIRST: ``overlay-msgpack-w2-*`` stream cells (tokenizer workers never loaded the overlay:
HTTP 200 + ``finish_reason: "abort"``) and ``messages`` stream ``queue_full`` cells (the overlay's SSE
wrapper raised HTTPException inside the generator the Anthropic handler consumes after HTTP 200:
``api_error`` "Internal server error").
"""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

from tests.support.real_server.aborts import fire, judge
from tests.support.real_server.configs import (
    OVERLAY_MSGPACK,
    OVERLAY_MSGPACK_W2,
    OVERLAY_PICKLE_CLI,
    UPSTREAM_MSGPACK,
    UPSTREAM_PICKLE,
)
from tests.support.real_server.probes import wait_idle
from tests.support.real_server.server import VENV_BIN, run_status

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
CASES = (
    [("priority", r, s) for r in ("completions", "chat") for s in (False, True)]
    + [("queue_full", r, s) for r in ("completions", "chat", "messages") for s in (False, True)]
    + [("running_timeout", r, True) for r in ("completions", "chat", "messages")]
    + [("running_timeout", "completions", False)]
)
OBSERVED: dict[tuple, str] = {}


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: c.name)
def server(request, server_pool):
    return server_pool.get(request.param)


@pytest.mark.parametrize("trigger,route,stream", CASES, ids=lambda v: str(v).lower())
def test_abort_cell(server, trigger, route, stream):
    outcome = fire(server.url, trigger, route, stream)
    OBSERVED[(server.config.name, trigger, route, stream)] = outcome.brief()
    judge(server.config, trigger, route, stream, outcome)


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


def test_status_over_http_agrees_and_upstream_answers_404(server):
    """``GET /overlay/status`` (``--http``): the overlay's server answers with the local verdict; pure upstream
    has no such route (404), and ``status`` says the server runs without the overlay (exit 1)."""
    answer = httpx.get(f"{server.url}/overlay/status", timeout=60.0)
    result = run_status(server.url, "--http")
    if server.config.overlay:
        assert answer.status_code == 200 and answer.json()["ok"] is True, answer.text
        assert result.returncode == 0 and "/overlay/status" in result.stdout, result.stdout + result.stderr
    else:
        assert answer.status_code == 404, answer.text
        assert result.returncode == 1 and "the server runs without sglang-overlay" in result.stderr, result.stderr


def teardown_module(module):
    if OBSERVED:
        print("\n[e2e] abort matrix (config, trigger, route, stream) -> outcome")
        for key in sorted(OBSERVED, key=str):
            print(f"  {key}: {OBSERVED[key]}")


def test_an_upstream_server_has_metrics_and_no_overlay_series(server_pool):
    """The control of test_02's info metric: SGLang's own /metrics, without the overlay, carries none."""
    from tests.support.real_server.probes import overlay_info_series

    server = server_pool.get(UPSTREAM_MSGPACK)
    assert "sglang:" in httpx.get(server.url + "/metrics", timeout=60.0).text
    assert overlay_info_series(server.url) == []  # the same question finds it with the overlay (test_02)
