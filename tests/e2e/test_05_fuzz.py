"""Bounded property-based fuzz of the patched server's OpenAI endpoints from its own OpenAPI schema
(schemathesis 4 strategies driven by hypothesis, loopback only): every 5xx the overlay gives for a case,
upstream gives too for the same case; afterwards the server is healthy and holds no request.

Excluded: prompts of out-of-vocabulary token ids (``out_of_vocab``: ``prompt``, or SGLang's ``input_ids`` on
either route): upstream's scheduler dies on them (a chat case with ``input_ids`` [2222332685336, -308, -194] took
the overlay's server down in a rehearsal; hypothesis derives its derandomized seed from the test's source, so a
reformatted test draws other cases).
Bounds (for a 2-core CI): ``MAX_EXAMPLES`` cases per operation, derandomized; generated ``max_tokens`` /
``max_completion_tokens`` are clamped to 16 (set to 16 when the case has none) and ``n`` to 2 (the rest of each case is as generated), so a
case costs one short generation.

Both servers run without the abort triggers of the matrix (``--max-queued-requests 1``, the running
timeout): with them a prompt list of two is a batch of two requests that meets "The request queue is
full." (503) or not depending on when the scheduler takes the first, so the same case could give 503
on one server and 200 on the other (seen once in a CI rehearsal). Those aborts are the matrix's job.

A server that stops answering mid-fuzz fails the case with its exit status and log tail (``_call``): one
0.5.23 CI rehearsal saw the overlay server go away here (connection reset, then refused) and kept no log, so
the death could not be attributed. Three later runs of this module on 0.5.23 (alone, after GSM8K, and after
the launch tier as in CI) did not repeat it, and the logged case itself answers 200 on both servers."""

from __future__ import annotations

import httpx
import pytest
import requests
from hypothesis import HealthCheck, assume, given, settings

from tests.support.real_server.configs import OVERLAY_PLAIN, UPSTREAM_PLAIN
from tests.support.real_server.model import VOCAB_SIZE
from tests.support.real_server.probes import wait_idle

pytestmark = [
    pytest.mark.e2e,
]
schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis (scripts/requirements-cpu-<pin>.lock) not installed"
)

OPERATIONS = {"/v1/completions": "POST", "/v1/chat/completions": "POST"}
MAX_EXAMPLES = 30
CLAMPS = {"max_tokens": 16, "max_completion_tokens": 16, "n": 2, "best_of": 2}


VOCAB = VOCAB_SIZE  # the tiny model's vocabulary: its tokenizer has exactly this many ids


def _token_ids(value):
    """Every int inside a prompt given as token ids (list of ints or list of lists)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [i for v in value for i in _token_ids(v)]
    return []


def out_of_vocab(body) -> bool:
    """A prompt of token ids outside the vocabulary: kills upstream's scheduler in ``VocabParallelEmbedding``
    (an IndexError when first seen, on 0.5.20; not re-checked on 0.5.23), the whole server goes down, with or
    without the overlay. Excluded here,
    reported as an upstream defect; the fuzz would otherwise end at the first such case."""
    if not isinstance(body, dict):
        return False
    # ``prompt`` (completions) and SGLang's ``input_ids`` (chat too) are both fed to the embedding as token ids
    return any(i < 0 or i >= VOCAB for key in ("prompt", "input_ids") for i in _token_ids(body.get(key)))


def _clamp(body):
    if isinstance(body, dict):
        if not any(isinstance(body.get(k), int) for k in ("max_tokens", "max_completion_tokens")):
            body["max_tokens"] = CLAMPS["max_tokens"]  # absent: the server would generate to the context end
        for key, bound in CLAMPS.items():
            if isinstance(body.get(key), int) and not isinstance(body.get(key), bool) and body[key] > bound:
                body[key] = bound
    return body


def _call(server, case):
    """``case.call`` against ``server``; a dropped or refused connection fails with the server's state and log."""
    try:
        return case.call(base_url=server.url, timeout=60)
    except requests.exceptions.ConnectionError as exc:
        status = server.process.poll()
        state = "running" if status is None else f"exited with status {status}"
        raise AssertionError(
            f"{server.config.name} stopped answering ({exc!r:.200}); its root process is {state}. "
            f"Log tail ({server.log_path}):\n{server.log_tail(80)}"
        ) from exc


@pytest.fixture(scope="module")
def servers(server_pool):
    return server_pool.get(OVERLAY_PLAIN), server_pool.get(UPSTREAM_PLAIN)


@pytest.mark.parametrize("path", sorted(OPERATIONS))
def test_no_overlay_only_server_errors(servers, path):
    overlay, upstream = servers
    schema = schemathesis.openapi.from_url(f"{overlay.url}/openapi.json")
    operation = schema[path][OPERATIONS[path]]
    overlay_only: list[str] = []
    seen = {"cases": 0, "5xx": 0}

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def check(case):
        case.body = _clamp(case.body)
        assume(not out_of_vocab(case.body))
        seen["cases"] += 1
        mine = _call(overlay, case)
        if mine.status_code >= 500:
            seen["5xx"] += 1
            theirs = _call(upstream, case)
            if theirs.status_code < 500:
                overlay_only.append(
                    f"{mine.status_code} vs upstream {theirs.status_code}: {case.body!r:.300} -> {mine.text[:300]}"
                )

    check()
    assert seen["cases"] >= MAX_EXAMPLES // 2, seen
    assert not overlay_only, "5xx only with the overlay:\n" + "\n".join(overlay_only)


def test_server_healthy_and_idle_after_fuzzing(servers):
    for server in servers:
        load = wait_idle(server.url, timeout=60)
        assert load["running"] == 0 and load["queued"] == 0, (server.config.name, load)
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
