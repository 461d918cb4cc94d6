"""Serves sglang >=0.5.23 (the pin 0.5.23): release folder ``forward_context/`` of moe-cp-compaction.

The design it serves: top-k reads its count from the forward context.

``forward.py``: the boundary hook (the shared boundary, plus the compact count stated through
``ForwardContext.moe_num_token_non_padded``). ``startup.py``: the start-up refusals as this design builds
and captures the MoE. Story: ``patches/moe-cp-compaction.md``.
"""

from sglang_overlay.core.registry import Release, Target

_MODULE = "sglang.srt.models.deepseek_v2"

RELEASE = Release(
    ">=0.5.23",
    targets=(
        Target(_MODULE, "DeepseekV2MoE.forward_deepep", f"{__name__}.forward:forward_deepep", "AROUND"),
        Target(_MODULE, "DeepseekV2MoE.__init__", f"{__name__}.startup:refuse_unsupported_at_startup", "AFTER"),
    ),
)
