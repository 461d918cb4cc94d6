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

MoE entries that would bypass ``forward_deepep`` under CP are refused:
``DeepseekV2MoE.__init__`` fails model construction (server start-up) for
two-batch overlap (the ``op_gate`` ... ``op_output`` path) and for the mega-MoE
backend, and ``op_gate`` refuses a batch that carries dummy rows anyway.
"""

from __future__ import annotations

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


def forward_deepep(original, self, hidden_states, forward_batch=None, input_ids_global=None):
    """AROUND ``DeepseekV2MoE.forward_deepep``."""
    layout = layout_of(forward_batch) if forward_batch is not None else None
    if layout is None or not layout.has_dummy_rows:
        return original(self, hidden_states, forward_batch, input_ids_global=input_ids_global)

    _check_rows("DeepseekV2MoE.forward_deepep hidden_states", hidden_states.shape[0], layout)
    if hidden_states.is_cuda and torch.cuda.is_current_stream_capturing():
        raise MoeCompactionError(
            f"{PATCH_ID}: a CUDA graph is being captured through a forward with dummy CP rows; "
            "the compact row count is data-dependent and cannot be captured. Run CP prefill "
            "eagerly (or through breakable graphs, where MoE is an eager break)."
        )
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


def refuse_unsupported_at_startup(result, self, *args, **kwargs):
    """AFTER ``DeepseekV2MoE.__init__``: refuse MoE entries that bypass the boundary under CP."""
    from sglang.srt.layers.moe.utils import get_moe_a2a_backend
    from sglang.srt.runtime_context import get_exec, get_parallel

    parallel = get_parallel()
    if not (getattr(parallel, "enable_prefill_cp", False) and parallel.attn_cp_size > 1):
        return None
    problems = []
    if self._enable_a2a_moe and get_exec().overlap.enable_two_batch_overlap:
        problems.append(
            "two-batch overlap runs MoE through op_gate ... op_output, which this patch does not "
            "compact (disable --enable-two-batch-overlap)"
        )
    if get_moe_a2a_backend().is_megamoe():
        problems.append("the mega-MoE backend runs forward_mega_moe, which this patch does not compact")
    if problems:
        raise OverlayError(
            f"patch '{PATCH_ID}' cannot keep CP dummy rows out of sparse MoE in layer "
            f"{self.layer_id}: " + "; ".join(problems)
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
