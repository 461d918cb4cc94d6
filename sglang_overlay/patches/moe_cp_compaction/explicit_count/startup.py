"""AFTER ``DeepseekV2MoE.__init__`` (sglang < 0.5.23): refuse MoE configurations that bypass the boundary.

Job: name, under prefill CP, two-batch overlap, mega-MoE, tensor-parallel MoE (``--moe-a2a-backend none``)
and breakable CUDA graphs that capture CP prefill (``layers/cp/bcg.py:enable_cp_bcg_capture``).
Invariant: decided as upstream decides it. Cost: a few flag reads per MoE layer at model construction.
"""

from __future__ import annotations

from sglang_overlay.patches.moe_cp_compaction.refusals import (
    MEGA_MOE,
    TENSOR_PARALLEL_MOE,
    TWO_BATCH_OVERLAP,
    refuse_under_cp,
)

__all__ = ["BREAKABLE_CP_PREFILL_GRAPHS", "refuse_unsupported_at_startup", "unsupported_under_cp"]

BREAKABLE_CP_PREFILL_GRAPHS = (
    "breakable CUDA graphs capture context-parallel prefill here (prefill CUDA graph backend "
    "'breakable' with --enable-prefill-cp, --cp-strategy zigzag and the trtllm_mha prefill "
    "attention backend): gate, top-k and this patch's gather and scatter are captured into graph "
    "segments, and a replay re-runs only those segments and the DeepEP all-to-all (the one eager "
    "break), not this patch's Python, on live batches padded to the captured CP-local rows, so "
    "dummy rows would reach gate, top-k and DeepEP (set --cuda-graph-backend-prefill disabled)"
)


def _captures_cp_prefill_with_breakable_graphs() -> bool:
    """What the prefill CUDA graph runner decides (``PrefillCudaGraphRunner.__init__``): a
    breakable backend (``resolve_prefill_backend``) and upstream's own CP predicate
    ``layers/cp/bcg.py:enable_cp_bcg_capture`` on the server args."""
    from sglang.srt.layers.cp.bcg import enable_cp_bcg_capture
    from sglang.srt.model_executor.cuda_graph_config import Backend
    from sglang.srt.runtime_context import get_exec, get_server_args

    config = get_exec().graph.cuda_graph_config
    if config is None or config.prefill.backend != Backend.BREAKABLE:
        return False
    return bool(enable_cp_bcg_capture(get_server_args()))


def unsupported_under_cp(moe) -> list[str]:
    """The reasons this MoE layer's configuration would let CP dummy rows past the boundary."""
    from sglang.srt.layers.moe.utils import get_moe_a2a_backend
    from sglang.srt.runtime_context import get_exec

    megamoe = get_moe_a2a_backend().is_megamoe()
    problems = []
    if moe._enable_a2a_moe and get_exec().overlap.enable_two_batch_overlap:
        problems.append(TWO_BATCH_OVERLAP)
    if megamoe:
        problems.append(MEGA_MOE)
    if not moe._enable_a2a_moe and not megamoe:
        problems.append(TENSOR_PARALLEL_MOE)
    if _captures_cp_prefill_with_breakable_graphs():
        problems.append(BREAKABLE_CP_PREFILL_GRAPHS)
    return problems


def refuse_unsupported_at_startup(result, self, *args, **kwargs):
    """AFTER ``DeepseekV2MoE.__init__``: refuse MoE configurations that bypass the boundary under CP."""
    return refuse_under_cp(self, unsupported_under_cp)
