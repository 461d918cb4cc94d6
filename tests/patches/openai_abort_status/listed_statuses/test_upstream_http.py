"""Upstream sglang < 0.5.23's own answers to aborts over real HTTP (the patch off): the listed codes only.

A scripted model behind upstream's OpenAI routes and handlers (tests/support/scripted_server.py); the helpers
are the root http_cases.py's. What the patch answers instead is tested in test_http_answers.py, on every release.
"""

from __future__ import annotations

import httpx
import pytest

from tests.patches.openai_abort_status.http_cases import ENDPOINTS, SCRIPT, call, errors, finish_reasons, ok_stream
from tests.support.scripted_server import serve_openai

pytestmark = pytest.mark.ci_slow  # upstream's HTTP server in a fresh process


@pytest.fixture(scope="module")
def upstream():
    with serve_openai(SCRIPT, env={"SGLANG_OVERLAY_DISABLE": "openai-abort-status"}) as handle:
        yield handle


# a string or a 429 is graceful even without streaming; a numpy 503 without streaming
# reaches h11 as the response status ("status code must be integer") and the connection drops.
DROPPED = "dropped"
UPSTREAM_STREAM_AFTER_FIRST = {"int_503": None, "np_503": None, "str_503": None, "intenum_429": None,
                               "unconvertible": None, "httpstatus_503": 503}  # fmt: skip
UPSTREAM_NON_STREAM = {"int_503": 503, "np_503": DROPPED, "str_503": 200, "str_429_spaces": 200,
                       "intenum_429": 200, "bool_true": 200, "httpstatus_503": 503}  # fmt: skip


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("key", sorted(UPSTREAM_STREAM_AFTER_FIRST))
def test_upstream_stream_treats_non_enum_codes_as_graceful(upstream, endpoint, key):
    payloads = ok_stream(upstream.base_url, endpoint, key, after=2)
    if UPSTREAM_STREAM_AFTER_FIRST[key] is None:
        assert errors(payloads) == [] and finish_reasons(payloads) == ["abort"]
    else:
        assert [e["code"] for e in errors(payloads)] == [503]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("key", sorted(UPSTREAM_NON_STREAM))
def test_upstream_non_stream(upstream, endpoint, key):
    with httpx.Client(base_url=upstream.base_url, timeout=30) as client:
        if UPSTREAM_NON_STREAM[key] == DROPPED:
            with pytest.raises(httpx.RemoteProtocolError):
                call(client, endpoint, key, after=2, stream=False)
            assert "status code must be integer" in upstream.log()
            return
        r = call(client, endpoint, key, after=2, stream=False)
    assert r.status_code == UPSTREAM_NON_STREAM[key]
    if r.status_code == 200:
        assert r.json()["choices"][0]["finish_reason"] == "abort"
