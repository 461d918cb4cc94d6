"""moe-cp-compaction for sglang < 0.5.23: top-k takes its count from ``forward_batch.num_token_non_padded``.

``forward.py``: the boundary hook (the shared boundary; the batch's count is the one top-k reads).
``startup.py``: the start-up refusals as this design builds and captures the MoE. Story:
``patches/moe-cp-compaction.md``.
"""

from sglang_overlay.core.registry import Dependency, Release, Target

_MODULE = "sglang.srt.models.deepseek_v2"

RELEASE = Release(
    "<0.5.23",
    targets=(
        Target(_MODULE, "DeepseekV2MoE.forward_deepep", f"{__name__}.forward:forward_deepep", "AROUND"),
        Target(_MODULE, "DeepseekV2MoE.__init__", f"{__name__}.startup:refuse_unsupported_at_startup", "AFTER"),
    ),
    depends=(
        Dependency("sglang.srt.layers.cp.bcg", "enable_cp_bcg_capture", "explicit_count.startup"),
        Dependency("sglang.srt.layers.moe.utils", "MoeA2ABackend.is_megamoe", "explicit_count.startup"),
        Dependency("sglang.srt.layers.moe.utils", "get_moe_a2a_backend", "explicit_count.startup"),
        Dependency("sglang.srt.model_executor.cuda_graph_config", "Backend.BREAKABLE", "explicit_count.startup"),
        Dependency("sglang.srt.model_executor.cuda_graph_config", "PhaseConfig.backend", "explicit_count.startup"),
        Dependency("sglang.srt.runtime_context", "ParallelContext.attn_cp_rank", "batch_layout"),
        Dependency("sglang.srt.runtime_context", "get_exec", "explicit_count.startup"),
        Dependency("sglang.srt.runtime_context", "get_server_args", "explicit_count.startup"),
    ),
)
