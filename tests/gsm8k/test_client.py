"""The runner's HTTP client: retries, streaming, aborts, timeouts and giving up, against an in-process
httpx transport (a stand-in for the server; the real upstream server is in test_gsm8k_e2e.py)."""

import asyncio
import json

import httpx
import pytest

from sglang_overlay_gsm8k.client import ClientConfig, Runner, RunnerError, api_root, discover_model


def _completion(text="#### 4", finish="stop", tokens=2):
    return {
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens},
    }


def _sse(*chunks, done=True):
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + ("data: [DONE]\n\n" if done else "")
    return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})


class Server:
    """Answers per question index (read from the prompt) with a list of responses, one per attempt."""

    def __init__(self, plan):
        self.plan, self.calls, self.bodies = plan, {}, []

    async def __call__(self, request: httpx.Request):
        body = json.loads(request.content)
        self.bodies.append((request, body))
        i = int(body["prompt"])
        n = self.calls[i] = self.calls.get(i, 0) + 1
        steps = self.plan.get(i, [_completion()])
        step = steps[min(n, len(steps)) - 1]
        if isinstance(step, Exception):
            raise step
        if callable(step):
            return await step(request)
        if isinstance(step, httpx.Response):
            return step
        return httpx.Response(200, json=step)


def run(plan, n=1, **cfg):
    server = Server(plan)
    config = ClientConfig(base_url="http://test/v1", backoff_s=0.001, backoff_max_s=0.002, **cfg)
    runner = Runner(config, lambda i: {"prompt": str(i)}, transport=httpx.MockTransport(server))
    return asyncio.run(runner.run(list(range(n)))), server, runner


def test_success_and_the_request_body():
    [out], server, _ = run({}, model="m", seed=3, stop=["Question:"], api_key="k", max_tokens=7)
    assert (out.text, out.error, out.attempts, out.completion_tokens, out.prompt_tokens) == ("#### 4", None, 1, 2, 10)
    request, body = server.bodies[0]
    assert request.url.path == "/v1/completions"
    assert request.headers["authorization"] == "Bearer k"
    assert body == {
        "prompt": "0",
        "model": "m",
        "max_tokens": 7,
        "temperature": 0.0,
        "stream": False,
        "stop": ["Question:"],
        "seed": 3,
    }


def test_5xx_and_429_are_retried_with_retry_after_4xx_is_not():
    plan = {
        0: [httpx.Response(503, text="busy"), httpx.Response(429, headers={"retry-after": "0"}), _completion()],
        1: [httpx.Response(400, json={"error": {"message": "bad"}}), _completion()],
    }
    (a, b), server, _ = run(plan, n=2)
    assert (a.error, a.attempts, a.retried) == (None, 3, ["503", "429"])
    assert (b.error, b.attempts, b.retried, server.calls[1]) == ("400", 1, [], 1)


def test_retries_are_bounded_and_the_last_error_is_kept():
    refuse = httpx.ConnectError("refused")
    (out,), server, _ = run({0: [refuse]}, max_retries=2)
    assert (out.error, out.attempts, out.retried, server.calls[0]) == ("connection", 3, ["connection"] * 2, 3)


def test_per_request_deadline_is_a_timeout_error():
    async def stall(request):
        await asyncio.sleep(30)

    (out,), server, _ = run({0: [stall, stall]}, timeout_s=0.05, max_retries=1)
    assert (out.error, out.attempts, out.retried) == ("timeout", 2, ["timeout"])


def test_finish_reason_abort_is_an_error_not_an_invalid_answer():
    (out,), server, _ = run({0: [_completion(text="", finish="abort")]})
    assert (out.error, out.attempts) == ("abort", 1)


def test_streaming_text_usage_and_errors():
    ok = _sse(
        {"choices": [{"index": 0, "text": "#### ", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": "42", "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}},
    )
    error_chunk = _sse(
        {"choices": [{"index": 0, "text": "par", "finish_reason": None}]},
        {"error": {"message": "overloaded", "type": "SERVICE_UNAVAILABLE", "code": 503}},
    )
    cut = _sse({"choices": [{"index": 0, "text": "#### 1", "finish_reason": None}]}, done=False)
    (a, b, c), server, _ = run({0: [ok], 1: [error_chunk, ok], 2: [cut, cut]}, n=3, stream=True, max_retries=1)
    assert (a.text, a.finish_reason, a.completion_tokens, a.error) == ("#### 42", "stop", 3, None)
    assert a.ttft_s is not None and a.ttft_s <= a.latency_s
    assert server.bodies[0][1]["stream_options"] == {"include_usage": True}
    assert (b.text, b.retried, b.error) == ("#### 42", ["503"], None)
    assert (c.error, c.attempts) == ("connection", 2)


def test_chat_responses_are_read_from_the_message():
    async def chat(request):
        body = json.loads(request.content)
        assert request.url.path == "/v1/chat/completions"
        return httpx.Response(
            200,
            json={
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": body["messages"][-1]["content"]},
                    }
                ]
            },
        )

    cfg = ClientConfig(base_url="http://test", mode="chat")
    runner = Runner(
        cfg, lambda i: {"messages": [{"role": "user", "content": f"#### {i}"}]}, transport=httpx.MockTransport(chat)
    )
    outs = asyncio.run(runner.run([5, 6]))
    assert [o.text for o in outs] == ["#### 5", "#### 6"]


def test_give_up_after_consecutive_failures_accounts_for_every_question():
    dead = httpx.ConnectError("refused")
    plan = {i: [dead] for i in range(100)}
    outs, server, runner = run(plan, n=100, parallel=4, max_retries=1, give_up_after=6)
    assert [o.index for o in outs] == list(range(100))
    sent = sum(o.error != "skipped" for o in outs)
    assert runner.gave_up and 6 <= sent <= 6 + 4 - 1
    assert sum(server.calls.values()) == 2 * sent  # skipped questions never reach the server
    assert {o.error for o in outs} == {"connection", "skipped"}


def test_a_success_resets_the_give_up_count():
    dead = httpx.ConnectError("refused")
    plan = {i: [dead] for i in range(100) if i % 3}
    outs, _, runner = run(plan, n=100, parallel=1, max_retries=0, give_up_after=3)
    assert not runner.gave_up and all(o.error != "skipped" for o in outs)


def test_model_discovery():
    async def models(request):
        assert request.url.path == "/v1/models"
        return httpx.Response(200, json={"object": "list", "data": [{"id": "first"}, {"id": "second"}]})

    cfg = ClientConfig(base_url="http://test:1/v1/", backoff_s=0.001)
    assert asyncio.run(discover_model(cfg, httpx.MockTransport(models))) == "first"

    def down(request):
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(RunnerError, match="--model"):
        asyncio.run(discover_model(cfg, httpx.MockTransport(down)))
    assert api_root("http://h:1/v1/") == api_root("http://h:1") == "http://h:1"
