"""A concurrent client for OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``.

``parallel`` workers, each with its own one-connection ``httpx.AsyncClient`` (one
shared pool of N connections costs O(N) per request in httpcore's pool scan, which
made the client the bottleneck at --parallel 64). Each question is one request
under a whole-request deadline, retried with jittered exponential backoff (and
``Retry-After`` when the server sends one) on 429, 5xx, timeouts and connection
errors; a streamed error chunk counts as its status code. A response that ends
with ``finish_reason: "abort"`` and no error is recorded as the error "abort":
an aborted generation is a server failure, not a wrong answer. After
``give_up_after`` consecutive questions failed, the remaining ones are recorded
as "skipped" instead of being sent to a server that is gone, so a dead server
ends a run quickly with every question accounted for.

Invariants: ``Runner.run`` returns exactly one ``Outcome`` per index, in order; at
most ``parallel`` requests are in flight. Cost: one connection per worker; the
client's own CPU per request is JSON encode/decode (the benchmark,
``scripts/bench_gsm8k_runner.py``, shows it is not the bottleneck). Needs httpx
(the gsm8k extra).
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import time
from typing import Callable

import httpx

from sglang_overlay_gsm8k.outcome import ClientConfig, Outcome, RunnerError, api_root

__all__ = ["ClientConfig", "Outcome", "Runner", "RunnerError", "api_root", "discover_model"]

RETRYABLE_STATUS = {408, 425, 429}  # plus every 5xx


class _AttemptError(Exception):
    def __init__(self, kind: str, message: str, retryable: bool, retry_after: float | None = None):
        super().__init__(message)
        self.kind, self.message, self.retryable, self.retry_after = kind, message, retryable, retry_after


def _status_error(status: int, message: str, headers: httpx.Headers | None = None) -> _AttemptError:
    retry_after = None
    if headers is not None and headers.get("retry-after"):
        try:
            retry_after = float(headers["retry-after"])
        except ValueError:
            retry_after = None
    retryable = status >= 500 or status in RETRYABLE_STATUS
    return _AttemptError(str(status), message[:500], retryable, retry_after)


def _error_status(error: dict) -> int | None:
    code = error.get("code")
    if isinstance(code, int):
        return code
    if isinstance(code, str) and code.isdigit():
        return int(code)
    return None


def _make_client(
    cfg: ClientConfig,
    transport: httpx.AsyncBaseTransport | None = None,
    connections: int = 1,
    ssl_context: ssl.SSLContext | None = None,
) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    return httpx.AsyncClient(
        base_url=api_root(cfg.base_url),
        headers=headers,
        transport=transport,
        verify=ssl_context or httpx.create_ssl_context(),
        timeout=httpx.Timeout(cfg.timeout_s),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


def _backoff(cfg: ClientConfig, attempt: int, retry_after: float | None) -> float:
    delay = min(cfg.backoff_max_s, cfg.backoff_s * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
    if retry_after is not None:
        delay = max(delay, min(retry_after, 60.0))
    return delay


async def discover_model(cfg: ClientConfig, transport: httpx.AsyncBaseTransport | None = None) -> str:
    """The first id ``/v1/models`` lists, retrying like a question does."""
    async with _make_client(cfg, transport) as client:
        last = "no attempt"
        for attempt in range(1, cfg.max_retries + 2):
            try:
                r = await client.get("/v1/models")
                if r.status_code == 200:
                    data = r.json().get("data") or []
                    if not data or "id" not in data[0]:
                        raise RunnerError(f"{cfg.base_url}/v1/models lists no model; pass --model")
                    return data[0]["id"]
                err = _status_error(r.status_code, r.text, r.headers)
            except httpx.TransportError as exc:
                err = _AttemptError("connection", f"{type(exc).__name__}: {exc}", True)
            except (json.JSONDecodeError, AttributeError, TypeError) as exc:
                raise RunnerError(f"{cfg.base_url}/v1/models did not return an OpenAI model list: {exc}") from exc
            last = f"{err.kind}: {err.message}"
            if not err.retryable or attempt > cfg.max_retries:
                break
            await asyncio.sleep(_backoff(cfg, attempt, err.retry_after))
        raise RunnerError(
            f"cannot list models at {api_root(cfg.base_url)}/v1/models ({last}); "
            "is the server up? (--base-url, or pass --model to skip discovery)"
        )


class Runner:
    def __init__(
        self, cfg: ClientConfig, body_for: Callable[[int], dict], transport: httpx.AsyncBaseTransport | None = None
    ):
        """``body_for(i)`` returns the request body for question ``i`` (without model/sampling fields);
        ``transport`` replaces the network (tests)."""
        if cfg.mode not in ("completions", "chat"):
            raise ValueError(f"mode must be 'completions' or 'chat', not {cfg.mode!r}")
        self.cfg = cfg
        self.body_for = body_for
        self.path = "/v1/completions" if cfg.mode == "completions" else "/v1/chat/completions"
        self.transport = transport
        self.consecutive_failures = 0
        self.gave_up = False

    def request_body(self, index: int) -> dict:
        cfg = self.cfg
        body = dict(self.body_for(index))
        body.update(model=cfg.model, max_tokens=cfg.max_tokens, temperature=cfg.temperature, stream=cfg.stream)
        if cfg.stop:
            body["stop"] = list(cfg.stop)
        if cfg.seed is not None:
            body["seed"] = cfg.seed
        if cfg.stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def _parse_choice(self, choice: dict, out: Outcome, delta: bool) -> str:
        if self.cfg.mode == "completions":
            text = choice.get("text") or ""
        else:
            text = (choice.get("delta" if delta else "message") or {}).get("content") or ""
        if choice.get("finish_reason") is not None:
            out.finish_reason = choice["finish_reason"]
        return text

    @staticmethod
    def _take_usage(usage: dict | None, out: Outcome) -> None:
        if usage:
            out.completion_tokens = usage.get("completion_tokens", out.completion_tokens)
            out.prompt_tokens = usage.get("prompt_tokens", out.prompt_tokens)

    async def _attempt_plain(self, client: httpx.AsyncClient, body: dict, out: Outcome) -> None:
        r = await client.post(self.path, json=body)
        if r.status_code != 200:
            raise _status_error(r.status_code, r.text, r.headers)
        try:
            data = r.json()
            if "error" in data and not data.get("choices"):
                status = _error_status(data["error"]) or 500
                raise _status_error(status, str(data["error"].get("message")))
            out.text = self._parse_choice(data["choices"][0], out, delta=False)
        except (json.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _AttemptError("protocol", f"not an OpenAI response: {exc}: {r.text[:200]}", False) from exc
        self._take_usage(data.get("usage"), out)

    async def _attempt_stream(self, client: httpx.AsyncClient, body: dict, out: Outcome, t0: float) -> None:
        async with client.stream("POST", self.path, json=body) as r:
            if r.status_code != 200:
                await r.aread()
                raise _status_error(r.status_code, r.text, r.headers)
            parts: list[str] = []
            done = False
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(payload)
                except json.JSONDecodeError as exc:
                    raise _AttemptError("protocol", f"bad stream chunk {payload[:200]!r}", False) from exc
                if "error" in chunk:
                    err = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
                    raise _status_error(_error_status(err) or 500, str(err.get("message")))
                for choice in chunk.get("choices") or []:
                    text = self._parse_choice(choice, out, delta=True)
                    if text and out.ttft_s is None:
                        out.ttft_s = time.perf_counter() - t0
                    parts.append(text)
                self._take_usage(chunk.get("usage"), out)
            if not done:
                raise _AttemptError("connection", "stream ended without [DONE]", True)
            out.text = "".join(parts)

    async def one(self, client: httpx.AsyncClient, index: int) -> Outcome:
        cfg = self.cfg
        out = Outcome(index)
        body = self.request_body(index)
        start = time.perf_counter()
        while True:
            out.attempts += 1
            out.text, out.finish_reason, out.ttft_s = "", None, None
            t0 = time.perf_counter()
            try:
                async with asyncio.timeout(cfg.timeout_s):
                    if cfg.stream:
                        await self._attempt_stream(client, body, out, t0)
                    else:
                        await self._attempt_plain(client, body, out)
                if out.finish_reason == "abort":
                    raise _AttemptError("abort", "finish_reason 'abort' with no error status", False)
                out.latency_s = time.perf_counter() - t0
                out.error = out.error_message = None
                break
            except _AttemptError as exc:
                err = exc
            except (TimeoutError, httpx.TimeoutException) as exc:
                err = _AttemptError(
                    "timeout", f"no complete response within {cfg.timeout_s:g} s ({type(exc).__name__})", True
                )
            except httpx.TransportError as exc:
                err = _AttemptError("connection", f"{type(exc).__name__}: {exc}", True)
            out.latency_s = time.perf_counter() - t0
            out.error, out.error_message = err.kind, err.message
            if not err.retryable or out.attempts > cfg.max_retries:
                break
            out.retried.append(err.kind)
            await asyncio.sleep(_backoff(cfg, out.attempts, err.retry_after))
        out.total_s = time.perf_counter() - start
        return out

    async def run(self, indices: list[int], on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        """Every index gets exactly one Outcome, in the order of ``indices``."""
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in indices:
            queue.put_nowait(i)
        results: dict[int, Outcome] = {}

        ssl_context = httpx.create_ssl_context()  # one for all workers: loading CA files costs ~30 ms each

        async def worker() -> None:
            async with _make_client(self.cfg, self.transport, ssl_context=ssl_context) as client:
                await drain(client)

        async def drain(client: httpx.AsyncClient) -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                if self.gave_up:
                    out = Outcome(
                        i,
                        error="skipped",
                        error_message=(f"not sent: {self.cfg.give_up_after} consecutive questions had failed"),
                    )
                else:
                    out = await self.one(client, i)
                    if out.error is None:
                        self.consecutive_failures = 0
                    else:
                        self.consecutive_failures += 1
                        if self.cfg.give_up_after and self.consecutive_failures >= self.cfg.give_up_after:
                            self.gave_up = True
                results[i] = out
                if on_done is not None:
                    on_done(out)

        await asyncio.gather(*(worker() for _ in range(max(1, min(self.cfg.parallel, len(indices))))))
        return [results[i] for i in indices]
