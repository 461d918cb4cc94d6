"""Hooks on upstream ``DeepseekV2MoE``: sparse MoE sees the valid CP-local rows only.

Patch ``moe-cp-compaction``. When the forward batch carries a compute-padding
layout with dummy rows (``sglang_overlay.patches.moe_cp_compaction.layout``), ``forward_deepep`` runs
upstream's own body on the compact valid rows: one gather with an index tensor
prepared once per forward, then gate, shared experts, top-k (with
``num_token_non_padded`` set to the compact count), DeepEP dispatch, experts and
combine, all on compact rows, with ``input_ids_global`` (hash routing) compacted
in step. The result is scattered back into a zero-filled tensor of the padded
shape (same dtype and device), so downstream layer communication sees the row
layout it expects. Without CP, or with a layout without dummy rows, upstream runs
unchanged.

Configurations that would let CP dummy rows past this boundary are refused at
start-up (``DeepseekV2MoE.__init__`` fails model construction, see
``unsupported_under_cp``): two-batch overlap (the ``op_gate`` ... ``op_output``
path), the mega-MoE backend, tensor-parallel MoE without an all-to-all backend
(``forward_normal``), and breakable CUDA graphs for CP prefill (a replay re-runs
captured segments and the DeepEP all-to-all, never this module's Python). As
defence in depth, ``op_gate`` refuses a batch that carries dummy rows, and a
graph capture through a CP forward raises.

Cost: without CP one attribute read and upstream; with CP a few attribute reads,
a comparison of two short length lists and one flag read; with dummy rows one
``index_select``, one ``new_zeros`` and one ``index_copy_``, no host sync.
"""

from __future__ import annotations

import functools

import torch

from sglang_overlay.errors import OverlayError
from sglang_overlay.patches.moe_cp_compaction.layout import ComputePaddingLayout, layout_of

PATCH_ID = "moe-cp-compaction"


class MoeCompactionError(RuntimeError):
    """The MoE boundary cannot keep dummy rows out of sparse MoE for this input."""


def compact_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Gather the valid rows (``index`` from ``ComputePaddingLayout.device_tensors``)."""
    return x.index_select(0, index)


def restore_rows(y: torch.Tensor, index: torch.Tensor, num_rows: int) -> torch.Tensor:
    """Scatter compact rows back into a zero-filled tensor of ``num_rows`` rows."""
    full = y.new_zeros((num_rows, *y.shape[1:]))
    return full.index_copy_(0, index, y)


def _check_rows(what: str, rows: int, layout: ComputePaddingLayout) -> None:
    if rows != layout.num_rows:
        raise MoeCompactionError(
            f"{PATCH_ID}: {what} has {rows} rows but the forward's {layout.source} layout has "
            f"{layout.num_rows} CP-local rows ({layout.num_valid} valid). The MoE input is not "
            "this rank's CP-local rows (e.g. a moe-cp all-gather before MoE), which this patch "
            f"does not support; disable it with SGLANG_OVERLAY_DISABLE={PATCH_ID} or change the "
            "parallel layout."
        )


@functools.cache
def _breakable_graph_flag():
    """Upstream's ``is_in_breakable_cuda_graph`` (imported once, on the first CP forward)."""
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.context import (
        is_in_breakable_cuda_graph,
    )

    return is_in_breakable_cuda_graph


def _inside_graph_capture(hidden_states: torch.Tensor) -> bool:
    """A CUDA graph is being captured (or a breakable graph warmed up / captured) around this call."""
    return _breakable_graph_flag()() or (hidden_states.is_cuda and torch.cuda.is_current_stream_capturing())


def forward_deepep(original, self, hidden_states, forward_batch=None, input_ids_global=None):
    """AROUND ``DeepseekV2MoE.forward_deepep``."""
    layout = layout_of(forward_batch) if forward_batch is not None else None
    if layout is None:
        return original(self, hidden_states, forward_batch, input_ids_global=input_ids_global)
    if _inside_graph_capture(hidden_states):
        # Checked with or without dummy rows: a capture freezes either path, and replays of a
        # breakable CP graph pad live batches to the captured CP-local rows (layers/cp/bcg.py).
        raise MoeCompactionError(
            f"{PATCH_ID}: a CUDA graph is being captured through a context-parallel forward "
            f"({layout}); replay would re-run neither this patch's gather and scatter nor its "
            "choice of rows, so CP dummy rows would reach gate, top-k and DeepEP. Run CP prefill "
            "without prefill CUDA graphs (--cuda-graph-backend-prefill disabled)."
        )
    if not layout.has_dummy_rows:
        return original(self, hidden_states, forward_batch, input_ids_global=input_ids_global)

    _check_rows("DeepseekV2MoE.forward_deepep hidden_states", hidden_states.shape[0], layout)
    index, count = layout.device_tensors(hidden_states.device)
    compact = compact_rows(hidden_states, index)
    if input_ids_global is not None and getattr(self, "is_hash", False):
        _check_rows("input_ids_global", input_ids_global.shape[0], layout)
        input_ids_global = compact_rows(input_ids_global, index)

    saved = forward_batch.num_token_non_padded
    # None upstream (moe_ep_size == 1) already means "no padded rows": keep it.
    forward_batch.num_token_non_padded = None if saved is None else count
    try:
        out = original(self, compact, forward_batch, input_ids_global=input_ids_global)
    finally:
        forward_batch.num_token_non_padded = saved
    return restore_rows(out, index, layout.num_rows)


# Why each refused MoE configuration defeats the boundary, and what to change (start-up messages).
TWO_BATCH_OVERLAP = (
    "two-batch overlap runs MoE through op_gate ... op_output, which this patch does not "
    "compact (disable --enable-two-batch-overlap)"
)
MEGA_MOE = "the mega-MoE backend runs forward_mega_moe, which this patch does not compact"
TENSOR_PARALLEL_MOE = (
    "without an all-to-all MoE backend (--moe-a2a-backend none) the MoE runs forward_normal "
    "(tensor-parallel experts on rows gathered across CP ranks), which this patch does not "
    "compact (select an all-to-all backend such as --moe-a2a-backend deepep)"
)
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


def refuse_under_cp(moe, problems_of) -> None:
    """Under prefill CP, raise naming every problem ``problems_of(moe)`` finds (each upstream pin has its own)."""
    from sglang.srt.runtime_context import get_parallel

    parallel = get_parallel()
    if not (parallel.enable_prefill_cp and parallel.attn_cp_size > 1):
        return None
    problems = problems_of(moe)
    if problems:
        raise OverlayError(
            f"patch '{PATCH_ID}' cannot keep CP dummy rows out of sparse MoE in layer "
            f"{moe.layer_id}: " + "; ".join(problems)
            + f". Change the configuration or disable the patch (SGLANG_OVERLAY_DISABLE={PATCH_ID})."
        )
    return None


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
