"""Environment variables that steer the overlay and its patches, read in one place.

Every variable is read when it is needed (never cached at import), so tests and
launchers can set them per process.
"""

from __future__ import annotations

import os

STRICT = "SGLANG_OVERLAY_STRICT"
DISABLE = "SGLANG_OVERLAY_DISABLE"
ALLOW_UNPINNED = "SGLANG_OVERLAY_ALLOW_UNPINNED"
LOCK = "SGLANG_OVERLAY_LOCK"
EXTRA_PATCHES = "SGLANG_OVERLAY_EXTRA_PATCHES"
SOURCE_APPLIED = "SGLANG_OVERLAY_SOURCE_APPLIED"
ABORT_HTTP_STATUS = "SGLANG_OVERLAY_ABORT_HTTP_STATUS"
OWNER_LANE_SLOW_PLAN_MS = "SGLANG_OVERLAY_OWNER_LANE_SLOW_PLAN_MS"
SGLANG_PLUGINS = "SGLANG_PLUGINS"

PLUGIN_NAME = "sglang_overlay"
PLUGIN_GROUP = "sglang.srt.plugins"

_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


def _csv(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def strict() -> bool:
    """Default strict: any drift, missing target or hook that did not take ends start-up."""
    return _flag(STRICT, True)


def disabled_patch_ids() -> list[str]:
    return _csv(DISABLE)


def allow_unpinned() -> bool:
    """Opt-out of the sglang version pin (per-target fingerprints are still enforced)."""
    return _flag(ALLOW_UNPINNED, False)


def lock_override() -> str | None:
    return os.environ.get(LOCK) or None


def extra_patch_modules() -> list[str]:
    """Extra patch declaration modules (tests, experiments) beside sglang_overlay.patches."""
    return _csv(EXTRA_PATCHES)


def source_applied() -> bool:
    """Set where the diff series was applied to the sources: runtime hooks then stay off."""
    return _flag(SOURCE_APPLIED, False)


def sglang_plugins_whitelist() -> list[str] | None:
    """SGLANG_PLUGINS as SGLang reads it: None when unset or empty (every plugin loads)."""
    raw = os.environ.get(SGLANG_PLUGINS, "")
    if not raw:
        return None
    return [x.strip() for x in raw.split(",") if x.strip()]


def abort_http_status() -> bool:
    """openai-abort-status: an error abort before the first SSE chunk becomes an HTTP error status
    (default on); 0 keeps upstream's HTTP 200 followed by an in-band error event."""
    return _flag(ABORT_HTTP_STATUS, True)


def owner_lane_slow_plan_ms() -> float:
    """cp-hicache-owner-lanes: owner-lane planning slower than this (ms) logs one warning (default 5)."""
    raw = os.environ.get(OWNER_LANE_SLOW_PLAN_MS, "").strip()
    if not raw:
        return 5.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{OWNER_LANE_SLOW_PLAN_MS}={raw!r}: expected milliseconds as a number") from None
    if value < 0:
        raise ValueError(f"{OWNER_LANE_SLOW_PLAN_MS}={raw!r}: must be >= 0")
    return value
