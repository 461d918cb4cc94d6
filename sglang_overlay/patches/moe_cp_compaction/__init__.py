"""Patch moe-cp-compaction: only valid rows reach the DeepSeek-V2 sparse MoE under CP.

This folder owns the patch: the declaration below and its implementation (``layout.py``: the
host-side valid-row layout of a forward; ``boundary.py``: the hooks at the MoE boundary and the
start-up refusals; ``v0_5_23.py``: the sglang 0.5.23 port, which states the compact count through
the forward context and refuses 0.5.23's own bypasses). Description and exit condition:
``patches/moe-cp-compaction.md``.
"""

from sglang_overlay.core.registry import Patch, Target

_MODULE = "sglang.srt.models.deepseek_v2"
_V20 = "<0.5.23"  # 0.5.23 takes the top-k count from the forward context: v0_5_23.py states it there
_HOOKS = "sglang_overlay.patches.moe_cp_compaction.boundary"
_V23 = "sglang_overlay.patches.moe_cp_compaction.v0_5_23"

PATCH = Patch(
    id="moe-cp-compaction",
    position=2,
    title="DeepSeek-V2 MoE: compact CP-local valid rows before sparse MoE, restore the padded layout after",
    description="moe-cp-compaction.md",
    role="scheduler",
    targets=(
        Target(_MODULE, "DeepseekV2MoE.forward_deepep", f"{_HOOKS}:forward_deepep", "AROUND", upstream=_V20),
        Target(_MODULE, "DeepseekV2MoE.__init__", f"{_HOOKS}:refuse_unsupported_at_startup", "AFTER", upstream=_V20),
        Target(_MODULE, "DeepseekV2MoE.forward_deepep", f"{_V23}:forward_deepep", "AROUND", upstream=">=0.5.23"),
        Target(_MODULE, "DeepseekV2MoE.__init__", f"{_V23}:refuse_unsupported_at_startup", "AFTER", upstream=">=0.5.23"),
        Target(_MODULE, "DeepseekV2MoE.op_gate", f"{_HOOKS}:refuse_dummy_rows_in_op_path", "BEFORE"),
    ),
)
