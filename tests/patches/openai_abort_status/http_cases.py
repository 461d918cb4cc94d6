"""The HTTP side of openai-abort-status's real-server tests: requests to upstream's OpenAI routes on a scripted
server (``tests/support/abort_scripts.py``), their streamed payloads read back, and what a well-formed error
must say. Shared by ``test_http_answers.py``, ``test_http_switches.py`` and the release folders' own HTTP tests.

Invariant: raw httpx reads (no client-side retries); nothing here starts a server. Cost: one request per call.
"""

from __future__ import annotations

import json

import httpx

from tests.support.abort_scripts import EXPECTED_STATUS

SCRIPT = "tests.support.abort_scripts:dispatch"
KEYS = sorted(EXPECTED_STATUS)
ENDPOINTS = ("chat", "completions")
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


# --------------------------------------------------------------------------- helpers


def body_for(endpoint: str, prompt: str, *, stream: bool, **extra) -> dict:
    body = {"model": "scripted-model", "stream": stream, **extra}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def sse_payloads(text: str) -> list:
    """The ``data:`` payloads of an SSE body, JSON-decoded ("[DONE]" kept as is)."""
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def call(client: httpx.Client, endpoint: str, key: str, *, after: int, stream: bool, via: str = "output", **extra):
    prompt = f"abort={key} after={after} via={via}"
    return client.post(PATHS[endpoint], json=body_for(endpoint, prompt, stream=stream, **extra))


def ok_stream(base_url: str, endpoint: str, key: str, after: int, via: str = "output") -> list:
    """POST a streaming request that must answer HTTP 200 with a well-formed SSE stream."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        r = call(client, endpoint, key, after=after, stream=True, via=via)
    assert r.status_code == 200, r.text
    payloads = sse_payloads(r.text)
    check_well_formed_stream(payloads)
    return payloads


def error_body(key: str) -> dict:
    """The OpenAI error object the patched server answers with an HTTP error status."""
    status, _ = EXPECTED_STATUS[key]
    return {"object": "error", "type": str(status.value), "param": None, "code": status.value}


def bad_request_body(key: str) -> dict:
    """The answer to a 400 abort, patched or not: upstream's own. ``_handle_abort_finish_reason`` raises ValueError
    and the OpenAI handler answers with create_error_response's defaults (type "BadRequestError"), where every
    other error status goes through HTTPException (type "<code>"). The string "400" gets it too."""
    return {"object": "error", "message": f"scripted abort {key}", "type": "BadRequestError", "param": None,
            "code": 400}  # fmt: skip


def check_message(message: str, key: str) -> None:
    assert message.startswith(f"scripted abort {key}")
    shown = EXPECTED_STATUS[key][1]
    if shown is not None:
        assert f"abort status_code {shown} is not an HTTP error status; reported as 500" in message


def finish_reasons(payloads: list) -> list:
    return [
        c["finish_reason"]
        for p in payloads
        if isinstance(p, dict)
        for c in p.get("choices", [])
        if c.get("finish_reason")
    ]


def errors(payloads: list) -> list:
    return [p["error"] for p in payloads if isinstance(p, dict) and "error" in p]


def streamed_text(payloads: list) -> str:
    text = ""
    for p in payloads:
        for c in p.get("choices", []) if isinstance(p, dict) else []:
            text += c.get("text") or (c.get("delta") or {}).get("content") or ""
    return text


def check_well_formed_stream(payloads: list) -> None:
    assert payloads and payloads[-1] == "[DONE]"
    assert payloads.count("[DONE]") == 1


def check_clean(server) -> None:
    stats = server.wait_idle()
    assert stats["live_request_states"] == 0, stats
    assert stats["scheduler_running"] == 0 and stats["stand_in_errors"] == 0, stats
    log = server.log()
    assert "Traceback" not in log and "Error in request" not in log, log[-4000:]
