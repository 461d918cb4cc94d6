"""Upstream's real scheduler-side error aborts on demand, and what each side must answer (the abort matrix's rules).

``fire(url, trigger, route, stream)`` provokes one of upstream's own 503 aborts on a server launched with
``server.ABORT_FLAGS`` and ``SGLANG_REQ_RUNNING_TIMEOUT=4`` (``priority``, ``queue_full``, ``running_timeout``: see
``tests/e2e/test_03_abort_matrix.py``) and returns what the client saw; ``judge(config, ...)`` asserts it: the
overlay's contract (README "openai-abort-status"), or for pure upstream the outcome pinned in ``UPSTREAM``.
Shared by the abort matrix (one rank) and the multi-rank tests (``--tp-size 2``, two nodes).
Cost: one request per cell; a ``queue_full`` try also holds three blockers for up to the 4 s running timeout.
"""

from __future__ import annotations

import time

import pytest

from tests.support import releases
from tests.support.real_server.probes import Outcome, QueueFiller, QueueLost, call

MESSAGE = {"priority": "priority is disabled", "queue_full": "queue is full", "running_timeout": "running timeout"}
LONG = 3500  # tokens: decoding runs well past the 4 s running timeout
QUEUE_TRIES = 10  # a try fills the queue in 0.5-2.7 s of the blockers' 4 s (measured, idle 2 cores)

# What upstream 0.5.23 gives for each cell (Outcome.brief()), observed on this tier's servers
# (key: ipc, trigger, route, stream). Losses: msgpack turns every streamed 503 into a graceful abort
# (Anthropic: a normal "ok" end); non-stream /v1/messages reports the 503 as Anthropic's typed overloaded_error.
UPSTREAM: dict[tuple, str] = {
    ("msgpack", "priority", "chat", False): "http_error 503",
    ("msgpack", "priority", "chat", True): "graceful_abort 200",
    ("msgpack", "priority", "completions", False): "http_error 503",
    ("msgpack", "priority", "completions", True): "graceful_abort 200",
    ("msgpack", "queue_full", "chat", False): "http_error 503",
    ("msgpack", "queue_full", "chat", True): "graceful_abort 200",
    ("msgpack", "queue_full", "completions", False): "http_error 503",
    ("msgpack", "queue_full", "completions", True): "graceful_abort 200",
    ("msgpack", "queue_full", "messages", False): "http_error 503 overloaded_error",
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
    ("pickle", "queue_full", "messages", False): "http_error 503 overloaded_error",
    ("pickle", "queue_full", "messages", True): "sse_error 200 overloaded_error first-event",
    ("pickle", "running_timeout", "chat", True): "sse_error 200 code=503 after-content",
    ("pickle", "running_timeout", "completions", False): "http_error 503",
    ("pickle", "running_timeout", "completions", True): "sse_error 200 code=503 after-content",
    ("pickle", "running_timeout", "messages", True): "sse_error 200 overloaded_error after-content",
}
# What other releases change of that, by the release folder of openai-abort-status that serves them (a new
# folder fails here until it says what its releases change). The releases before 0.5.23 reported the
# non-stream /v1/messages 503 as 500 api_error (both codecs).
UPSTREAM_CHANGES: dict[str, dict[tuple, str]] = {
    "status_range": {},
}
UPSTREAM.update(releases.per_release("openai-abort-status", UPSTREAM_CHANGES))


def fire(url: str, trigger: str, route: str, stream: bool) -> Outcome:
    """Provoke ``trigger`` (upstream's own abort) with one request on ``route``; what the client saw."""
    if trigger == "priority":
        return call(url, route, stream, priority=1)
    if trigger == "running_timeout":
        extra = {} if route == "messages" else {"ignore_eos": True}
        return call(url, route, stream, max_tokens=LONG, **extra)
    misses = []  # a blocker that ends early (the 4 s running timeout) frees a slot: the cell is repeated, never judged
    for _ in range(QUEUE_TRIES):
        start = time.monotonic()
        try:
            with QueueFiller(url) as filler:
                outcome = call(url, route, stream)
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


def judge(config, trigger: str, route: str, stream: bool, outcome: Outcome) -> None:
    """Assert ``outcome`` against the overlay's contract (``config.overlay``) or upstream's pinned outcome."""
    key = (config.name, trigger, route, stream)
    if config.overlay:
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
        pinned = UPSTREAM.get((config.ipc, trigger, route, stream))
        assert pinned is not None, f"no pinned upstream outcome for {key}: observed {outcome.brief()!r}"
        assert outcome.brief() == pinned, f"{key}: upstream gave {outcome.brief()!r}, pinned {pinned!r}"
