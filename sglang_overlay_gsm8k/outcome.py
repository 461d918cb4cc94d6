"""What the GSM8K client is asked (``ClientConfig``) and what one question's request ended as (``Outcome``).

Plain data, importable without the gsm8k extra (scoring and the journal read it; ``client`` needs httpx).
Invariant: an ``Outcome`` has ``error`` None exactly when the request answered. Cost: none.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class RunnerError(RuntimeError):
    """The run cannot start (server unreachable, no model)."""


@dataclass
class ClientConfig:
    base_url: str
    mode: str = "completions"  # or "chat"
    api_key: str | None = None
    model: str | None = None
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int | None = None
    stop: list[str] | None = None
    stream: bool = False
    parallel: int = 64
    timeout_s: float = 600.0
    max_retries: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    give_up_after: int = 20


@dataclass
class Outcome:
    """One question's request, after retries."""

    index: int
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    latency_s: float | None = None  # the last attempt, send to last byte
    ttft_s: float | None = None  # streaming only: first text chunk
    total_s: float = 0.0  # all attempts and backoff
    attempts: int = 0
    error: str | None = None  # None, an HTTP status ("503"), "timeout", "connection", "abort", "protocol", "skipped"
    error_message: str | None = None
    retried: list[str] = field(default_factory=list)  # the error of each attempt that was retried


def api_root(base_url: str) -> str:
    """``http://h:p``, ``http://h:p/`` and ``http://h:p/v1`` all name the same server."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url
