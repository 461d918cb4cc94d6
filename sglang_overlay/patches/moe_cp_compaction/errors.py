"""moe-cp-compaction: the patch's id and its two errors.

Job: one place for what the boundary and the layout raise, so release folders share them.
Invariant: messages name the patch and how to disable it. Cost: none (no torch, no sglang).
"""

from __future__ import annotations

PATCH_ID = "moe-cp-compaction"


class LayoutError(ValueError):
    """A layout or its inputs are inconsistent (the layout is not built)."""


class MoeCompactionError(RuntimeError):
    """The MoE boundary cannot keep dummy rows out of sparse MoE for this input."""
