"""AFTER ``DeepseekV2MoE.__init__`` (sglang >= 0.5.23): refuse MoE configurations that bypass the boundary.

Job: name, under prefill CP, two-batch overlap, mega-MoE (flydsl included), every a2a backend that runs
``forward_normal`` (none, pplx, flashinfer_megamoe, ascend_tp, customized) and breakable CUDA graphs that
capture CP prefill (``layers/cp/bcg:supports_prefill_cp_bcg``, on by default for the supported CP combinations).
Invariant: decided as upstream decides it. Cost: a few flag reads per MoE layer at model construction.
"""

from __future__ import annotations

from sglang_overlay.patches.moe_cp_compaction.refusals import (
    MEGA_MOE,
    TENSOR_PARALLEL_MOE,
    TWO_BATCH_OVERLAP,
    refuse_under_cp,
)

__all__ = ["refuse_unsupported_at_startup", "unsupported_under_cp"]

MEGA_MOE_FORWARD_CONTEXT = (
    f"{MEGA_MOE} (DeepGEMM MegaMoE, or on ROCm with SGLANG_AMD_USE_FLYDSL_MEGA_MOE=1 aiter MegaMoEv2; "
    "select an all-to-all backend that runs forward_deepep, such as --moe-a2a-backend deepep)"
)
BREAKABLE_CP_PREFILL_GRAPHS_BY_DEFAULT = (
    "breakable CUDA graphs capture context-parallel prefill here (prefill CUDA graph backend 'breakable', "
    "which sglang 0.5.23 selects by default where layers/cp/bcg:supports_prefill_cp_bcg holds: "
    "--enable-prefill-cp with --cp-strategy zigzag and the trtllm_mha prefill attention backend, or "
    "--cp-strategy interleave with DSA attention): gate, top-k and this patch's gather and scatter are "
    "captured into graph segments, and a replay re-runs only those segments and the DeepEP all-to-all (the "
    "one eager break), not this patch's Python, on live batches padded to the captured CP-local rows, so "
    "dummy rows would reach gate, top-k and DeepEP (set --cuda-graph-backend-prefill disabled)"
)


def _captures_cp_prefill_with_breakable_graphs() -> bool:
    """``PrefillCudaGraphRunner.__init__``'s ``enable_cp_bcg_capture``: a breakable backend
    (``resolve_prefill_backend``: breakable when there is no config) and ``supports_prefill_cp_bcg``."""
    from sglang.srt.layers.cp.bcg import supports_prefill_cp_bcg
    from sglang.srt.model_executor.cuda_graph_config import Backend
    from sglang.srt.runtime_context import get_exec, get_server_args

    config = get_exec().graph.cuda_graph_config
    backend = config.prefill.backend if config is not None else Backend.BREAKABLE
    return backend == Backend.BREAKABLE and bool(supports_prefill_cp_bcg(get_server_args()))


def _forward_normal_backend(backend) -> str:
    """Why a MoE whose a2a backend does not run ``forward_deepep`` is refused (``--moe-a2a-backend none``:
    the shared message; pplx, flashinfer_megamoe, ascend_tp, customized: their own)."""
    if backend.is_none():
        return TENSOR_PARALLEL_MOE
    return (
        f"the MoE a2a backend '{backend.value}' (--moe-a2a-backend {backend.value}) runs forward_normal, "
        "not forward_deepep, which this patch does not compact (select an all-to-all backend that runs "
        "forward_deepep, such as --moe-a2a-backend deepep)"
    )


def unsupported_under_cp(moe) -> list[str]:
    """The reasons this MoE layer's configuration would let CP dummy rows past the boundary."""
    from sglang.srt.layers.moe.utils import get_moe_a2a_backend
    from sglang.srt.runtime_context import get_exec

    backend = get_moe_a2a_backend()
    runs_deepep = bool(moe._enable_a2a_moe)  # upstream's own choice of forward_deepep (DeepseekV2MoE.forward)
    runs_mega = backend.is_megamoe()
    checks = (
        (runs_deepep and get_exec().overlap.enable_two_batch_overlap, lambda: TWO_BATCH_OVERLAP),
        (runs_mega, lambda: MEGA_MOE_FORWARD_CONTEXT),
        (not (runs_deepep or runs_mega), lambda: _forward_normal_backend(backend)),
        (_captures_cp_prefill_with_breakable_graphs(), lambda: BREAKABLE_CP_PREFILL_GRAPHS_BY_DEFAULT),
    )
    return [reason() for hit, reason in checks if hit]


def refuse_unsupported_at_startup(result, self, *args, **kwargs):
    """AFTER ``DeepseekV2MoE.__init__``: refuse MoE configurations that bypass the boundary under CP."""
    return refuse_under_cp(self, unsupported_under_cp)
