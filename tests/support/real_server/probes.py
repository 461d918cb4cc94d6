"""Requests against a real server, reduced to comparable outcomes; real ways to make the scheduler abort.

``call(url, route, stream, **fields)`` sends one OpenAI ``/v1/completions``, ``/v1/chat/completions`` or
Anthropic ``/v1/messages`` request with raw httpx and classifies what the client saw as an ``Outcome``:

- ``http_error``: a non-200 status (``status``; ``message``/``error_type`` from the body);
- ``sse_error``: HTTP 200 and an error event in the stream (``code`` for OpenAI, ``error_type`` for
  Anthropic; ``after_content`` says whether content came first; ``done`` whether ``data: [DONE]`` followed);
- ``graceful_abort``: HTTP 200 and ``finish_reason: "abort"`` (what a lost error status looks like);
- ``ok``: anything else (a normal completion).

``greedy_texts(url)`` gives each of a few prompts' greedy completion, to compare two servers' outputs.

``QueueFiller`` occupies every running slot and the one waiting slot of a server launched with
``ABORT_FLAGS`` (``--max-running-requests 2 --max-queued-requests 1``), as the scheduler's own counts show
(``/v1/loads``), so that the next request meets upstream's real "queue full" abort
(``Scheduler._abort_on_queued_limit``, managers/scheduler.py:3258-3297).
Cost: a handful of HTTP requests; the blockers decode until ``SGLANG_REQ_RUNNING_TIMEOUT`` or ``release()``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

ROUTES = ("completions", "chat", "messages")
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions", "messages": "/v1/messages"}


@dataclass
class Outcome:
    kind: str
    status: int
    code: int | None = None
    error_type: str | None = None
    message: str = ""
    after_content: bool = False
    done: bool = False
    raw: str = field(default="", repr=False)

    def brief(self) -> str:
        bits = [self.kind, str(self.status)]
        if self.code is not None and self.kind == "sse_error":
            bits.append(f"code={self.code}")
        if self.error_type:
            bits.append(self.error_type)
        if self.kind == "sse_error":
            bits.append("after-content" if self.after_content else "first-event")
        return " ".join(bits)


def request_body(route: str, stream: bool, max_tokens: int = 8, **fields) -> dict:
    body = {"model": "default", "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    if route == "completions":
        body["prompt"] = "Natalia sold clips to 48 of her friends."
    else:
        body["messages"] = [{"role": "user", "content": "How many clips did Natalia sell?"}]
    body.update(fields)
    return body


def _error_fields(payload) -> tuple[int | None, str | None, str]:
    """(code, type, message) of an OpenAI or Anthropic error body / event."""
    if not isinstance(payload, dict):
        return None, None, str(payload)
    err = payload.get("error") if isinstance(payload.get("error"), dict) else payload
    code = err.get("code")
    return (
        (code if isinstance(code, int) else None),
        err.get("type"),
        str(err.get("message") or err.get("detail") or ""),
    )


def _classify_json(route: str, status: int, text: str) -> Outcome:
    try:
        payload = json.loads(text)
    except ValueError:
        payload = text
    if status != 200:
        code, etype, message = _error_fields(payload)
        return Outcome("http_error", status, code, etype, message, raw=text)
    if route == "messages":
        reason = payload.get("stop_reason")
    else:
        reason = (payload.get("choices") or [{}])[0].get("finish_reason")
        if isinstance(reason, dict):
            reason = reason.get("type")
    return Outcome("graceful_abort" if reason == "abort" else "ok", status, message=str(reason), raw=text)


def _classify_stream(route: str, status: int, text: str) -> Outcome:
    if status != 200:
        return _classify_json(route, status, text)
    content = False
    reason = None
    done = "data: [DONE]" in text
    found = None
    for line in text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        try:
            event = json.loads(line[6:])
        except ValueError:
            continue
        if "error" in event and (route != "messages" or event.get("type") == "error"):
            code, etype, message = _error_fields(event)
            found = found or Outcome("sse_error", status, code, etype, message, after_content=content)
            continue
        if route == "messages":
            if event.get("type") == "content_block_delta":
                content = True
            if event.get("type") == "message_delta":
                reason = (event.get("delta") or {}).get("stop_reason")
        else:
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if choice.get("text") or delta.get("content"):
                    content = True
                fr = choice.get("finish_reason")
                if fr:
                    reason = fr.get("type") if isinstance(fr, dict) else fr
    if found:
        found.done, found.raw = done, text
        return found
    return Outcome("graceful_abort" if reason == "abort" else "ok", status, message=str(reason), done=done, raw=text)


def call(url: str, route: str, stream: bool, timeout: float = 120.0, **fields) -> Outcome:
    """One request with raw httpx; the whole response is read before classifying."""
    body = request_body(route, stream, **fields)
    headers = {"anthropic-version": "2023-06-01"} if route == "messages" else {}
    with httpx.Client(timeout=timeout) as client:
        with client.stream("POST", url + PATHS[route], json=body, headers=headers) as resp:
            text = resp.read().decode("utf-8", "replace")
            status = resp.status_code
    outcome = (_classify_stream if stream else _classify_json)(route, status, text)
    if route != "messages":
        outcome.error_type = None  # OpenAI bodies' "type" is a class name that varies by path; status/code say it
    return outcome


def _find(d, key):
    if isinstance(d, dict):
        if key in d:
            return d[key]
        for v in d.values():
            found = _find(v, key)
            if found is not None:
                return found
    return None


def server_load(url: str) -> dict:
    """Running and queued request counts, from the scheduler (``/v1/loads?include=core``)."""
    data = httpx.get(url + "/v1/loads", params={"include": "core"}, timeout=10).json()
    loads = data.get("loads") or []
    return {
        "running": sum(int(_find(x, "num_running_reqs") or 0) for x in loads),
        "queued": sum(int(_find(x, "num_waiting_reqs") or 0) for x in loads),
        "raw": loads,
    }


class QueueLost(RuntimeError):
    """A blocker ended (running timeout, load) before the queue was full: set the probe up again."""


class QueueFiller:
    """Occupy ``running`` slots and ``queued`` waiting slots with blockers the scheduler is seen holding.

    The blockers do not stream: a streamed blocker's end reached this process only after it had parsed the
    thousands of token events before it (800 tokens/s on 2 cores), seconds after the scheduler had freed
    the slot, so ``still_full()`` said "full" for a request that had been admitted (CI, stop 24's rehearsal).
    A non-streamed blocker's response ends when the scheduler ends it."""

    def __init__(self, url: str, running: int = 2, queued: int = 1, max_new_tokens: int = 3500):
        self.url, self.running, self.queued, self.max_new_tokens = url, running, queued, max_new_tokens
        self.rids = [f"e2e-filler-{uuid.uuid4().hex[:8]}-{i}" for i in range(running + queued)]
        self._threads: list[threading.Thread] = []
        self.finished = [threading.Event() for _ in self.rids]

    def _run(self, i: int) -> None:
        body = {
            "rid": self.rids[i],
            "text": f"filler {i}: Natalia sold clips",
            "sampling_params": {"max_new_tokens": self.max_new_tokens, "temperature": 0, "ignore_eos": True},
        }
        try:
            httpx.post(self.url + "/generate", json=body, timeout=120)
        except httpx.HTTPError:
            pass
        finally:
            self.finished[i].set()

    def _wait_until(self, key: str, count: int, what: str) -> None:
        deadline = time.monotonic() + 30
        while server_load(self.url)[key] < count:
            if not self.still_full() or time.monotonic() > deadline:
                self.release()
                raise QueueLost(f"{what} never held {count}: {server_load(self.url)}")
            time.sleep(0.02)

    def __enter__(self) -> "QueueFiller":
        for i in range(len(self.rids)):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)
            if i < self.running:  # one at a time: two arriving together would meet the queue limit themselves
                self._wait_until("running", i + 1, "the running batch")
        self._wait_until("queued", self.queued, "the waiting queue")
        return self

    def still_full(self) -> bool:
        """True while every blocker still runs (no slot freed since ``__enter__``)."""
        return not any(ev.is_set() for ev in self.finished)

    def release(self) -> None:
        for rid in self.rids:
            try:
                httpx.post(self.url + "/abort_request", json={"rid": rid}, timeout=10)
            except httpx.HTTPError:
                pass
        for t in self._threads:
            t.join(30)

    def __exit__(self, *exc) -> None:
        self.release()


def wait_idle(url: str, timeout: float = 60.0) -> dict:
    """Wait until the scheduler holds no running or queued request; returns the last load."""
    deadline = time.monotonic() + timeout
    while True:
        load = server_load(url)
        if load["running"] == 0 and load["queued"] == 0:
            return load
        if time.monotonic() > deadline:
            return load
        time.sleep(0.2)


GREEDY_PROMPTS = (
    "Natalia sold clips to 48 of her friends in April,",
    "The capital of France is",
    "def fibonacci(n):",
    "1, 2, 3, 4,",
)


def greedy_texts(url: str, prompts: tuple[str, ...] = GREEDY_PROMPTS, max_tokens: int = 12) -> dict[str, str]:
    """Each prompt's greedy completion (temperature 0, ``ignore_eos``: always ``max_tokens`` tokens) from
    ``/v1/completions``; servers that compute the same thing answer the same texts."""
    texts = {}
    with httpx.Client(timeout=120) as client:
        for prompt in prompts:
            body = {
                "model": "default",
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
            }
            reply = client.post(url + PATHS["completions"], json=body)
            reply.raise_for_status()
            texts[prompt] = reply.json()["choices"][0]["text"]
    return texts


def overlay_info_series(url: str) -> list[dict]:
    """The ``sglang_overlay_info`` samples of a server's ``/metrics`` (labels and value each); the route must
    answer, so an empty list means a server with metrics and without the overlay's series."""
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(url + "/metrics", timeout=60.0)
    response.raise_for_status()
    return [
        {"labels": dict(sample.labels), "value": sample.value}
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "sglang_overlay_info"
    ]
