"""Declaration of patch moe-cp-compaction (implementation: sglang_overlay.moe)."""

from sglang_overlay.registry import Patch, Target

_MODULE = "sglang.srt.models.deepseek_v2"
_HOOKS = "sglang_overlay.moe.boundary"

PATCH = Patch(
    id="moe-cp-compaction",
    title="DeepSeek-V2 MoE: compact CP-local valid rows before sparse MoE, restore the padded layout after",
    description="moe-cp-compaction.md",
    role="scheduler",
    targets=(
        Target(_MODULE, "DeepseekV2MoE.forward_deepep", f"{_HOOKS}:forward_deepep", "AROUND"),
        Target(_MODULE, "DeepseekV2MoE.__init__", f"{_HOOKS}:refuse_unsupported_at_startup", "AFTER"),
        Target(_MODULE, "DeepseekV2MoE.op_gate", f"{_HOOKS}:refuse_dummy_rows_in_op_path", "BEFORE"),
    ),
    drop_when=(
        "upstream DeepseekV2MoE takes a per-row validity layout (or an index of valid rows) for CP "
        "compute padding instead of the suffix-only num_token_non_padded"
    ),
)
