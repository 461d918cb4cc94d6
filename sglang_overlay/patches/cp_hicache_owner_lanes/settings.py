"""cp-hicache-owner-lanes: its one knob, validated at start-up (declared on the patch), read per cache."""

from __future__ import annotations

from sglang_overlay.core.registry import Knob

SLOW_PLAN_MS = Knob(
    "SGLANG_OVERLAY_OWNER_LANE_SLOW_PLAN_MS",
    "5",
    "owner-lane planning slower than this many milliseconds logs one warning",
    kind="number",
    minimum=0,
)


def slow_plan_ms() -> float:
    return SLOW_PLAN_MS.read()
