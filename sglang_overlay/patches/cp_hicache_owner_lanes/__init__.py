"""Patch cp-hicache-owner-lanes: HiCache load-back, capacity and host-backup gates per KV owner lane.

Root (every release): ``planner.py``, ``leaf_index.py``, ``metadata.py``, ``counters.py``,
``cache_state.py``, ``report.py``, ``settings.py``. Release folder: ``unified/`` (sglang >=0.5.23,
``UnifiedRadixCache``), declaring its ``RELEASE`` and targets. Description and exit condition: ``patches/cp-hicache-owner-lanes.md``.
"""

from sglang_overlay.core.registry import Patch
from sglang_overlay.patches.cp_hicache_owner_lanes.settings import SLOW_PLAN_MS

PATCH = Patch(
    id="cp-hicache-owner-lanes",
    position=1,
    title="HiCache load-back under page-owner KV residency, owner-lane eviction planned from CPU metadata",
    description="cp-hicache-owner-lanes.md",
    process="scheduler",
    targets=(),  # every target belongs to one upstream design: unified/ declares them
    knobs=(SLOW_PLAN_MS,),
)
