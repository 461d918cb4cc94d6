"""moe-cp-compaction for sglang < 0.5.23: top-k takes its count from ``forward_batch.num_token_non_padded``.

``forward.py``: the boundary hook (the shared boundary; the batch's count is the one top-k reads).
``startup.py``: the start-up refusals as this design builds and captures the MoE. Story:
``patches/moe-cp-compaction.md``.
"""

from sglang_overlay.core.registry import Release, Target

_MODULE = "sglang.srt.models.deepseek_v2"

RELEASE = Release(
    "<0.5.23",
    targets=(
        Target(_MODULE, "DeepseekV2MoE.forward_deepep", f"{__name__}.forward:forward_deepep", "AROUND"),
        Target(_MODULE, "DeepseekV2MoE.__init__", f"{__name__}.startup:refuse_unsupported_at_startup", "AFTER"),
    ),
)
