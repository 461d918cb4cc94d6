"""The MoE boundary both releases run: upstream's ``forward_deepep`` on the valid CP-local rows only.

Job: :func:`run_on_valid_rows` (layout of the forward, capture guard, identity paths, row check, one
gather, upstream on the compact rows with the compact count stated, one scatter into the padded shape).
A release folder passes how its upstream reads that count (``count_scope``) beyond ``num_token_non_padded``.
Invariant: without CP or dummy rows upstream runs unchanged; the count is restored also when upstream raises.
Cost: without dummy rows a few attribute reads; with them one gather, one zero-fill, one scatter; no host sync.
"""

from __future__ import annotations

import functools
from contextlib import nullcontext

import torch

from sglang_overlay.patches.moe_cp_compaction.batch_layout import layout_of
from sglang_overlay.patches.moe_cp_compaction.errors import PATCH_ID, MoeCompactionError
from sglang_overlay.patches.moe_cp_compaction.rows import check_rows, compact_rows, restore_rows

__all__ = ["run_on_valid_rows"]


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


def _no_scope(count):
    return nullcontext()


def run_on_valid_rows(
    original, self, hidden_states, forward_batch=None, input_ids_global=None, *, count_scope=_no_scope
):
    """``original(self, hidden_states, forward_batch, input_ids_global=...)`` on the valid rows of the forward.

    ``count_scope(count)`` is a context manager entered around the compact call (``count``: the compact row
    count, an int32 device scalar) for a release whose top-k reads its bound elsewhere than the batch.
    """
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

    check_rows("DeepseekV2MoE.forward_deepep hidden_states", hidden_states.shape[0], layout)
    index, count = layout.device_tensors(hidden_states.device)
    compact = compact_rows(hidden_states, index)
    if input_ids_global is not None and getattr(self, "is_hash", False):
        check_rows("input_ids_global", input_ids_global.shape[0], layout)
        input_ids_global = compact_rows(input_ids_global, index)

    saved = forward_batch.num_token_non_padded
    # None upstream (moe_ep_size == 1) already means "no padded rows": keep it.
    forward_batch.num_token_non_padded = None if saved is None else count
    try:
        with count_scope(count):
            out = original(self, compact, forward_batch, input_ids_global=input_ids_global)
    finally:
        forward_batch.num_token_non_padded = saved
    return restore_rows(out, index, layout.num_rows)
