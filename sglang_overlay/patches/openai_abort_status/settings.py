"""openai-abort-status: its one knob, validated at start-up (declared on the patch), read per call."""

from __future__ import annotations

from sglang_overlay.core.registry import Knob

ABORT_HTTP_STATUS = Knob(
    "SGLANG_OVERLAY_ABORT_HTTP_STATUS",
    "1",
    "0 keeps upstream's HTTP 200 + in-band error event for an error abort before the first SSE chunk "
    "of an OpenAI route (default: a real HTTP error status)",
)


def abort_http_status() -> bool:
    """An error abort before the first SSE chunk becomes an HTTP error status (default on)."""
    return ABORT_HTTP_STATUS.read()
