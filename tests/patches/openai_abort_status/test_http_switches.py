"""openai-abort-status over real HTTP with the switches around it: ``SGLANG_OVERLAY_ABORT_HTTP_STATUS=0``
(``in_band``), ``SGLANG_OVERLAY_DISABLE=openai-abort-status`` (``upstream``: the pin as shipped), a malformed
switch, and upstream's msgpack IPC (``SGLANG_USE_PICKLE_IPC=0``), where plain int codes come from.

Upstream's OpenAI routes and handlers with a scripted model (tests/support/scripted_server.py); what the patched
server answers with its defaults is test_http_answers.py's.
Invariant: with the status switched off the error stays in band; without the patch upstream's own answers come
back unchanged; every server is left clean. Cost: four servers in fresh processes (in_band, upstream, and the
msgpack pair) plus one that refuses start-up (``ci_slow``).
"""

from __future__ import annotations

import httpx
import pytest

from tests.patches.openai_abort_status.http_cases import (
    ENDPOINTS,
    SCRIPT,
    bad_request_body,
    call,
    check_clean,
    errors,
    finish_reasons,
    ok_stream,
)
from tests.support.abort_scripts import EXPECTED_STATUS
from tests.support.scripted_server import serve_openai

pytestmark = pytest.mark.ci_slow  # upstream's HTTP server in a fresh process per configuration


@pytest.fixture(scope="module")
def in_band():
    with serve_openai(SCRIPT, env={"SGLANG_OVERLAY_ABORT_HTTP_STATUS": "0"}) as handle:
        yield handle


@pytest.fixture(scope="module")
def upstream():
    with serve_openai(SCRIPT, env={"SGLANG_OVERLAY_DISABLE": "openai-abort-status"}) as handle:
        yield handle


# --------------------------------------------------------------------------- switch off the HTTP status


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("key", ["int_503", "str_abc"])
def test_env_off_keeps_the_in_band_error_before_the_first_chunk(in_band, endpoint, key):
    payloads = ok_stream(in_band.base_url, endpoint, key, after=0)
    (error,) = errors(payloads)
    status, _ = EXPECTED_STATUS[key]
    assert payloads[0] == {"error": error}  # the first event
    assert (error["code"], error["type"]) == (status.value, status.name)
    with httpx.Client(base_url=in_band.base_url, timeout=30) as client:  # non-streaming: unaffected
        assert call(client, endpoint, key, after=0, stream=False).status_code == status.value


def test_in_band_server_is_clean(in_band):
    check_clean(in_band)


# --------------------------------------------------------------------------- without the overlay


# What the pin answers without the patch (written out): a plain or numpy 503 in a stream is a graceful abort;
def test_upstream_answers_http_200_for_an_abort_before_the_first_chunk(upstream):
    payloads = ok_stream(upstream.base_url, "chat", "httpstatus_503", after=0)
    assert [e["code"] for e in errors(payloads)] == [503]


def test_upstream_patch_is_off(upstream):
    assert "openai-abort-status" not in upstream.stats()["overlay"]["applied"]


# a 400 abort: the answer the patched server gives too (test_http_answers.py)
@pytest.mark.parametrize("key", ["httpstatus_400", "int_400"])
def test_upstream_answers_a_400_abort_the_same(upstream, key):
    with httpx.Client(base_url=upstream.base_url, timeout=30) as client:
        r = call(client, "chat", key, after=2, stream=False)
    assert (r.status_code, r.json()) == (400, bad_request_body(key))


def test_a_malformed_switch_refuses_start_up():
    with pytest.raises(RuntimeError, match="during start-up") as info:
        with serve_openai(SCRIPT, env={"SGLANG_OVERLAY_ABORT_HTTP_STATUS": "maybe"}):
            pass
    assert "SGLANG_OVERLAY_ABORT_HTTP_STATUS='maybe'" in str(info.value)


# --------------------------------------------------------------------------- msgpack IPC: where plain ints come from

# Under SGLANG_USE_PICKLE_IPC=0 upstream's own msgpack codec carries the scheduler's
# HTTPStatus.SERVICE_UNAVAILABLE across the process boundary as a plain int 503.


@pytest.fixture(scope="module")
def msgpack_servers():
    with serve_openai(SCRIPT, env={"SGLANG_USE_PICKLE_IPC": "0"}) as patched_mp:
        with serve_openai(
            SCRIPT, env={"SGLANG_USE_PICKLE_IPC": "0", "SGLANG_OVERLAY_DISABLE": "openai-abort-status"}
        ) as upstream_mp:
            yield patched_mp, upstream_mp


@pytest.mark.parametrize("via", ["output", "abort_req"])
def test_msgpack_ipc_turns_the_enum_into_an_int_and_only_the_patch_reports_it(msgpack_servers, via):
    patched_mp, upstream_mp = msgpack_servers
    after = ok_stream(patched_mp.base_url, "chat", "httpstatus_503", after=2, via=via)
    assert [(e["code"], e["type"]) for e in errors(after)] == [(503, "SERVICE_UNAVAILABLE")]
    with httpx.Client(base_url=patched_mp.base_url, timeout=30) as client:
        assert call(client, "chat", "httpstatus_503", after=0, stream=True, via=via).status_code == 503

    for after_words in (0, 2):  # upstream: a graceful abort, HTTP 200, no error anywhere
        payloads = ok_stream(upstream_mp.base_url, "chat", "httpstatus_503", after=after_words, via=via)
        assert errors(payloads) == [] and finish_reasons(payloads) == ["abort"]


def test_msgpack_servers_are_clean(msgpack_servers):
    for server in msgpack_servers:
        check_clean(server)
