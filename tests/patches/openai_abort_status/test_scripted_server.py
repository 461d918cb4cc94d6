"""The scripted OpenAI server itself (tests/support/scripted_server.py) over real HTTP.

Upstream's routes and handlers, upstream's TokenizerManager request path, a scripted
scheduler: these tests pin down what the abort tests and the GSM8K runner rely on.
"""

import httpx
import openai
import pytest

from tests.support.scripted_server import serve_openai

pytestmark = pytest.mark.ci_slow  # the scripted upstream server in a fresh process

SCRIPT = "tests.support.abort_scripts:dispatch"


@pytest.fixture(scope="module")
def server():
    with serve_openai(SCRIPT, model_name="scripted-smoke") as handle:
        yield handle


def test_models_lists_the_served_name(server):
    body = httpx.get(server.base_url + "/v1/models").json()
    assert [m["id"] for m in body["data"]] == ["scripted-smoke"]


def test_completion_text_finish_and_word_usage(server):
    r = httpx.post(server.base_url + "/v1/completions", json={"model": "m", "prompt": "one two three"})
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["text"] == "hello there general kenobi"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["completion_tokens"] == 4


def test_stop_sequence_is_matched(server):
    r = httpx.post(server.base_url + "/v1/completions", json={"model": "m", "prompt": "x", "stop": ["general"]})
    choice = r.json()["choices"][0]
    assert choice["text"] == "hello there " and choice["matched_stop"] == "general"


def test_chat_stream_through_openai_client(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0)
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}, {"role": "user", "content": "there"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert text == "hello there general kenobi"
    assert finishes == ["stop"]
    assert len(content_chunks) >= 2  # streamed in pieces
    assert chunks[-1].usage.prompt_tokens == 2  # "hi\nthere": messages joined with newlines


def test_n2_chat_gets_two_choices_and_leaves_no_state(server):
    r = httpx.post(
        server.base_url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2},
    )
    assert [c["index"] for c in r.json()["choices"]] == [0, 1]
    assert server.wait_idle()["live_request_states"] == 0


def test_client_disconnect_aborts_and_releases_state(server):
    before = server.stats()["aborts_received"]
    with httpx.stream(
        "POST", server.base_url + "/v1/completions", json={"model": "m", "prompt": "slow", "stream": True}
    ) as r:
        first = next(r.iter_lines())
        assert first.startswith("data: ")
    stats = server.wait_idle()
    assert stats["aborts_received"] == before + 1
    assert stats["live_request_states"] == 0 and stats["scheduler_running"] == 0
    assert stats["stand_in_errors"] == 0 and stats["script_errors"] == 0


def test_no_traceback_in_the_server_log(server):
    assert "Traceback" not in server.log(), server.log()[-4000:]
