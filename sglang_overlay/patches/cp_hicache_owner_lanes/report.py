"""The patch's logger and its per-lane log formats, shared by every release.

Job: one logger name (``sglang_overlay.patches.cp_hicache_owner_lanes``) and the lane vectors'
text form. Invariant: formatting only, nothing counted here. Cost: string joins, on warning paths only.
"""

from __future__ import annotations

import logging
from typing import Iterable

logger = logging.getLogger("sglang_overlay.patches.cp_hicache_owner_lanes")


def lanes(values: Iterable) -> str:
    """``[0,1,1,1]``: one per-lane vector."""
    return "[" + ",".join(str(v) for v in values) + "]"


def lane_report(**vectors) -> str:
    """``need=[0,1,1,1] free=[0,4,4,4]``: per-lane vectors for one log line."""
    return " ".join(f"{name}={lanes(values)}" for name, values in vectors.items())
