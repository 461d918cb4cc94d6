"""BEFORE ``DeepseekV2MoE.op_gate`` (every release): the two-batch-overlap MoE ops never see dummy rows.

Job: defence in depth behind the start-up refusal of two-batch overlap under CP. Invariant: a forward
without dummy rows passes untouched. Cost: one ``layout_of`` read per ``op_gate`` call.
"""

from __future__ import annotations

from sglang_overlay.patches.moe_cp_compaction.batch_layout import layout_of
from sglang_overlay.patches.moe_cp_compaction.errors import PATCH_ID, MoeCompactionError

__all__ = ["refuse_dummy_rows_in_op_path"]


def refuse_dummy_rows_in_op_path(self, state):
    """BEFORE ``DeepseekV2MoE.op_gate``: the two-batch-overlap ops never see dummy rows."""
    layout = layout_of(state.get("forward_batch"))
    if layout is not None and layout.has_dummy_rows:
        raise MoeCompactionError(
            f"{PATCH_ID}: the two-batch-overlap MoE ops (op_gate ... op_output) received a "
            f"forward with dummy CP rows ({layout}); they are not compacted. Disable two-batch "
            "overlap under context parallelism."
        )
    return None
