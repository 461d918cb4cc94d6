"""Patch moe-cp-compaction: only valid rows reach the DeepSeek-V2 sparse MoE under CP.

This folder owns the patch: the declaration below and its implementation (``layout.py``: the
host-side valid-row layout of a forward; ``boundary.py``: the hooks at the MoE boundary and the
start-up refusals). Description and exit condition: ``patches/moe-cp-compaction.md``.
"""

from sglang_overlay.core.registry import Patch, Target

_MODULE = "sglang.srt.models.deepseek_v2"
_HOOKS = "sglang_overlay.patches.moe_cp_compaction.boundary"

PATCH = Patch(
    id="moe-cp-compaction",
    position=2,
    title="DeepSeek-V2 MoE: compact CP-local valid rows before sparse MoE, restore the padded layout after",
    description="moe-cp-compaction.md",
    role="scheduler",
    targets=(
        Target(_MODULE, "DeepseekV2MoE.forward_deepep", f"{_HOOKS}:forward_deepep", "AROUND"),
        Target(_MODULE, "DeepseekV2MoE.__init__", f"{_HOOKS}:refuse_unsupported_at_startup", "AFTER"),
        Target(_MODULE, "DeepseekV2MoE.op_gate", f"{_HOOKS}:refuse_dummy_rows_in_op_path", "BEFORE"),
    ),
)
