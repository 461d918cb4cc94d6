"""openai-abort-status over real HTTP on the patched server: upstream's OpenAI routes and handlers, a scripted
model, the overlay through the plugin path with its defaults.

Every abort code of the issue is sent through chat and completions, streaming (before and after the first chunk)
and non-streaming, with raw httpx reads and with the ``openai`` client; then the scheduler's AbortReq echo path,
n=2, a 400 keeping upstream's bad-request answer and 200 concurrent streams. The switches around the patch (the
status off, the patch off, msgpack IPC) are test_http_switches.py's.
Invariant: an abort with an error status answers an HTTP error before the first chunk and an in-band error event
after it; the server is left with no request state and no traceback (checked last). Cost: one server in a fresh
process for the module (``ci_slow``).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from tests.patches.openai_abort_status.http_cases import (
    ENDPOINTS,
    KEYS,
    PATHS,
    SCRIPT,
    bad_request_body,
    body_for,
    call,
    check_clean,
    check_message,
    check_well_formed_stream,
    error_body,
    errors,
    finish_reasons,
    ok_stream,
    sse_payloads,
    streamed_text,
)
from tests.support.abort_scripts import BAD_REQUEST_KEYS, EXPECTED_STATUS
from tests.support.scripted_server import serve_openai

pytestmark = pytest.mark.ci_slow  # upstream's HTTP server in a fresh process


@pytest.fixture(scope="module")
def patched():
    with serve_openai(SCRIPT) as handle:
        yield handle


@pytest.fixture(scope="module")
def patched_client(patched):
    with httpx.Client(base_url=patched.base_url, timeout=30) as client:
        yield client


# --------------------------------------------------------------------------- patched: the matrix


def test_patch_is_applied_in_the_server(patched):
    applied = patched.stats()["overlay"]["applied"]["openai-abort-status"]
    assert len(applied) == 3


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("key", KEYS)
def test_non_stream(patched_client, endpoint, key):
    r = call(patched_client, endpoint, key, after=2, stream=False)
    status, _ = EXPECTED_STATUS[key]
    if status is None:  # graceful abort: upstream behaviour unchanged
        assert r.status_code == 200
        assert r.json()["choices"][0]["finish_reason"] == "abort"
        return
    assert r.status_code == status.value
    body = r.json()
    check_message(body.pop("message"), key)
    assert body == error_body(key)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("key", KEYS)
def test_stream_abort_before_first_chunk_is_an_http_error(patched_client, endpoint, key):
    r = call(patched_client, endpoint, key, after=0, stream=True)
    status, _ = EXPECTED_STATUS[key]
    if status is None:
        assert r.status_code == 200
        payloads = sse_payloads(r.text)
        check_well_formed_stream(payloads)
        assert finish_reasons(payloads) == ["abort"] and errors(payloads) == []
        return
    assert r.status_code == status.value
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    check_message(body.pop("message"), key)
    assert body == error_body(key)  # the same body as the non-streaming path


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("key", KEYS)
def test_stream_abort_after_first_chunk_is_an_in_band_error(patched_client, endpoint, key):
    payloads = ok_stream(str(patched_client.base_url), endpoint, key, after=2)
    assert streamed_text(payloads) == "alpha beta "
    usage = [p["usage"] for p in payloads if isinstance(p, dict) and p.get("usage")]
    assert usage[-1]["completion_tokens"] == 2  # "alpha beta"
    assert usage[-1]["prompt_tokens"] == 3  # "abort=... after=2 via=output"
    status, _ = EXPECTED_STATUS[key]
    if status is None:
        assert finish_reasons(payloads) == ["abort"] and errors(payloads) == []
        return
    (error,) = errors(payloads)
    check_message(error.pop("message"), key)
    assert error == {"object": "error", "type": status.name, "param": None, "code": status.value}
    # order: content, the error event, the usage chunk, [DONE]
    at = next(i for i, p in enumerate(payloads) if isinstance(p, dict) and "error" in p)
    assert payloads[at + 1].get("usage") and payloads[at + 2] == "[DONE]"


@pytest.mark.parametrize("after", [0, 2])
def test_n2_chat_stream_with_aborting_choices(patched, patched_client, after):
    r = patched_client.post(PATHS["chat"], json=body_for("chat", f"abort=np_503 after={after}", stream=True, n=2))
    if after == 0:
        assert r.status_code == 503
    else:
        payloads = sse_payloads(r.text)
        check_well_formed_stream(payloads)
        assert [e["code"] for e in errors(payloads)] == [503]
        assert payloads[-2]["usage"]["completion_tokens"] >= 2
    assert patched.wait_idle()["live_request_states"] == 0


def test_n2_non_stream_with_aborting_choices(patched_client):
    r = patched_client.post(
        PATHS["completions"], json=body_for("completions", "abort=str_503 after=1", stream=False, n=2)
    )
    assert r.status_code == 503


@pytest.mark.parametrize("mode", ["non_stream", "before_first_chunk", "after_first_chunk"])
@pytest.mark.parametrize("key", ["int_503", "str_429_spaces", "str_abc", "none", "httpstatus_503"])
def test_scheduler_abort_echo_path(patched_client, key, mode):
    """Aborts the scheduler answers with an AbortReq echo (waiting/running timeouts) go through
    upstream's _handle_abort_req, not _handle_batch_output: same answers."""
    status, _ = EXPECTED_STATUS[key]
    if mode == "after_first_chunk":
        payloads = ok_stream(str(patched_client.base_url), "chat", key, after=2, via="abort_req")
        assert [e["code"] for e in errors(payloads)] == ([status.value] if status else [])
        return
    stream = mode == "before_first_chunk"
    r = call(patched_client, "completions", key, after=0, stream=stream, via="abort_req")
    if status is None:
        assert r.status_code == 200 and "abort" in r.text
    else:
        assert (r.status_code, r.json()["code"]) == (status.value, status.value)


# --------------------------------------------------------------------------- 400: upstream's bad-request path

# A 400 abort keeps upstream's own answer (http_cases.bad_request_body says why).


@pytest.mark.parametrize("via", ["output", "abort_req"])
@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("key", BAD_REQUEST_KEYS)
def test_400_abort_keeps_upstreams_bad_request_answer(patched_client, key, endpoint, via):
    r = call(patched_client, endpoint, key, after=2 if via == "output" else 0, stream=False, via=via)
    assert (r.status_code, r.json()) == (400, bad_request_body(key))


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("key", BAD_REQUEST_KEYS)
def test_400_abort_in_a_stream(patched_client, key, endpoint):
    early = call(patched_client, endpoint, key, after=0, stream=True)
    assert early.status_code == 400 and early.json()["code"] == 400
    assert early.json()["message"] == f"scripted abort {key}"
    payloads = ok_stream(str(patched_client.base_url), endpoint, key, after=2)
    assert errors(payloads) == [{"object": "error", "message": f"scripted abort {key}", "type": "BAD_REQUEST",
                                 "param": None, "code": 400}]  # fmt: skip


# --------------------------------------------------------------------------- patched: openai client


@pytest.fixture(scope="module")
def oai(patched):
    return openai.OpenAI(base_url=patched.base_url + "/v1", api_key="none", max_retries=0)


@pytest.mark.parametrize(
    "key, exc", [("int_503", openai.InternalServerError), ("str_429_spaces", openai.RateLimitError),
                 ("str_abc", openai.InternalServerError)]
)  # fmt: skip
def test_openai_client_non_stream_and_early_stream_errors(oai, key, exc):
    status, _ = EXPECTED_STATUS[key]
    with pytest.raises(exc) as info:
        oai.completions.create(model="m", prompt=f"abort={key} after=1")
    assert info.value.status_code == status.value
    with pytest.raises(exc) as info:
        oai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"abort={key} after=0"}], stream=True
        )
    assert info.value.status_code == status.value
    assert f"scripted abort {key}" in str(info.value)


def test_openai_client_error_after_first_chunk(oai):
    stream = oai.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "abort=int_503 after=2"}], stream=True
    )
    seen = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            seen.append(chunk.choices[0].delta.content if chunk.choices else None)
    assert "scripted abort int_503" in str(info.value)
    assert "".join(s or "" for s in seen) == "alpha beta "


def test_openai_client_graceful_abort_is_a_finish_reason(oai):
    stream = oai.completions.create(model="m", prompt="abort=none after=2", stream=True)
    assert [c.choices[0].finish_reason for c in stream if c.choices][-1] == "abort"


# --------------------------------------------------------------------------- patched: concurrency

# a third of the streams abort, with mixed codes, before and after their first chunk
MIXED = ["int_503", "np_503", "str_429_spaces", "none", "str_abc", "httpstatus_503", "float_503", "unconvertible"]


async def _one_stream(client: httpx.AsyncClient, i: int) -> tuple:
    endpoint = ENDPOINTS[i % 2]
    if i % 3 == 0:
        key = MIXED[(i // 3) % len(MIXED)]
        after = 0 if (i // 3) % 2 == 0 else 1
        prompt = f"abort={key} after={after} wait=0.05 gate=200"
    else:
        key, after, prompt = None, None, "pace=0.05 gate=200"
    async with client.stream("POST", PATHS[endpoint], json=body_for(endpoint, prompt, stream=True)) as r:
        text = (await r.aread()).decode()
    return i, key, after, r.status_code, text


def test_200_concurrent_streams_terminate_and_leave_no_state(patched):
    async def run():
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=patched.base_url, timeout=60, limits=limits) as client:
            return await asyncio.gather(*(_one_stream(client, i) for i in range(200)))

    results = asyncio.run(run())
    assert len(results) == 200
    for i, key, after, status_code, text in results:
        expected = EXPECTED_STATUS[key][0] if key else None
        if key is not None and expected is not None and after == 0:
            assert status_code == expected.value, (i, key, text)
            assert json.loads(text)["code"] == expected.value
            continue
        assert status_code == 200, (i, key, text)
        payloads = sse_payloads(text)
        check_well_formed_stream(payloads)
        if key is None:
            assert finish_reasons(payloads) == ["stop"] and errors(payloads) == []
            assert streamed_text(payloads) == "alpha beta gamma delta"
        elif expected is None:
            assert finish_reasons(payloads) == ["abort"] and errors(payloads) == []
        else:
            assert [e["code"] for e in errors(payloads)] == [expected.value], (i, key, text)
    stats = patched.wait_idle()
    assert stats["live_request_states"] == 0 and stats["scheduler_running"] == 0, stats
    assert stats["peak_live_request_states"] >= 200, stats  # all 200 were live at once


def test_patched_server_is_clean(patched):
    check_clean(patched)
