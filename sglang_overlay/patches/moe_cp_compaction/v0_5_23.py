"""moe-cp-compaction on sglang 0.5.23: only valid CP-local rows reach DeepseekV2MoE's gate, shared
experts, top-k and DeepEP dispatch.

What 0.5.23 does without it (docs/rebase-0.5.23/probe_moe_cp.py, tests/patches/moe_cp_compaction/
test_v0_5_23_leak.py): top-k no longer takes ``num_token_non_padded`` from ``forward_deepep``; it reads the
bound the forward context lends (``ForwardContext.moe_num_token_non_padded``, a getter set by
``forward_context(..., forward_batch=batch)`` to ``ForwardBatch.moe_num_token_non_padded``, which under CP asks
the strategy). Zigzag's count is the batch's whole ``num_token_non_padded``, so every CP padding row of a
rank's shard gets real expert ids and is dispatched; interleave's is the rank's ``per_rank_logical_token``,
so padding rows are masked before dispatch but still run through gate, shared experts and top-k, and that
count ignores ``forward_batch.num_token_non_padded`` (the lever of the 0.5.20 boundary).

What this module does
---------------------
``forward_deepep`` (AROUND ``DeepseekV2MoE.forward_deepep``) is the 0.5.20 boundary
(``boundary.forward_deepep``: layout of the forward, capture guard, identity paths, row check, one gather,
upstream on the compact rows, one scatter into zeros of the padded shape) around upstream's body, with
one addition at the point where upstream runs on the compact rows: the compact count is stated through
the forward context, ``forward_context(dataclasses.replace(get_forward_context(),
moe_num_token_non_padded=<getter>))`` (only where a forward context is active: ``has_forward_context()``),
so top-k masks nothing of the compact rows under either strategy. The getter keeps upstream's "no bound"
(``None``) where upstream's own getter answers ``None`` (as the 0.5.20 boundary keeps a ``None``
``num_token_non_padded``); otherwise it answers the compact count, the int32 device scalar that
``ComputePaddingLayout.device_tensors`` prepared once per forward.

``refuse_unsupported_at_startup`` (AFTER ``DeepseekV2MoE.__init__``) refuses, under prefill CP
(``enable_prefill_cp`` and ``attn_cp_size > 1``), the MoE configurations that run sparse MoE past this
boundary, naming each one and what to change: two-batch overlap (the ``op_gate`` ... ``op_output`` ops),
the mega-MoE backend (``DeepseekV2MoE.forward`` runs ``forward_mega_moe`` before ``forward_deepep``: DeepGEMM
MegaMoE, or on ROCm with ``SGLANG_AMD_USE_FLYDSL_MEGA_MOE=1`` aiter MegaMoEv2, ``layers/moe/mega_moe_flydsl.py``,
which 0.5.23 selects only with ``--moe-a2a-backend megamoe`` too), tensor-parallel MoE without a
``forward_deepep`` backend (``forward_normal`` on rows gathered across CP ranks, padding rows included:
``moe_cp_gathered_rows`` is ``per_rank_actual_token``; the message names the a2a backend: ``none``, or pplx,
flashinfer_megamoe, ascend_tp, customized, which do not set ``_enable_a2a_moe`` either), and breakable
prefill CUDA graphs that capture CP prefill. The last is decided as ``PrefillCudaGraphRunner.__init__``
decides it on 0.5.23: a breakable prefill backend (``resolve_prefill_backend``: the ``exec.graph`` config's
prefill backend, breakable when there is no config) and ``layers/cp/bcg:supports_prefill_cp_bcg(server_args)``
(0.5.20's ``enable_cp_bcg_capture`` is gone). On 0.5.23 that capture is the *default* for the supported CP
combinations (zigzag with trtllm_mha prefill attention; interleave with DSA attention, ep_size 1, on
Glm5NextForConditionalGeneration): ``arg_groups/cuda_graph_hook.py:apply_prefill_cp_cuda_graph_default``
selects it unless the operator set ``--cuda-graph-backend-prefill``; the message says to set it to
``disabled``. The BEFORE ``op_gate`` hook of 0.5.20 (``boundary.refuse_dummy_rows_in_op_path``) applies
unchanged: 0.5.23's ``op_gate`` still takes the TBO state with its ``forward_batch``.

Usage (the declaration; SGLang's HookRegistry calls the hooks with the original / the result)::

    Target(_MODULE, "DeepseekV2MoE.forward_deepep", f"{_V23}:forward_deepep", "AROUND", upstream=">=0.5.23")
    Target(_MODULE, "DeepseekV2MoE.__init__", f"{_V23}:refuse_unsupported_at_startup", "AFTER", upstream=">=0.5.23")
    Target(_MODULE, "DeepseekV2MoE.op_gate", f"{_HOOKS}:refuse_dummy_rows_in_op_path", "BEFORE", upstream=">=0.5.23")

Exit condition: patches/moe-cp-compaction.md ("When it can be dropped"); on 0.5.23 in particular when
``test_v0_5_23_leak.py`` fails because top-k's bound (or the strategies) keep CP padding rows out of gate,
shared experts, top-k and dispatch.

Invariants: a forward without CP, or with a layout without dummy rows, calls upstream unchanged (no forward
context is replaced, no tensor op); on the compact path the forward context and
``forward_batch.num_token_non_padded`` are restored after the call, also when it raises; the output has the
padded row count, dtype and device, dummy rows zero; no host sync at the boundary.

Cost over the 0.5.20 boundary (see there: a few attribute reads without dummy rows; one ``index_select``, one
``new_zeros``, one ``index_copy_`` with them): per MoE layer one more Python call and one cached ``layout_of``
read; on the compact path also one frozen-dataclass ``replace`` and one context-manager entry, and top-k's
bound costs upstream's own getter call. No tensor op and no host sync of its own.
"""

from __future__ import annotations

import dataclasses
import functools

from sglang_overlay.errors import OverlayError
from sglang_overlay.patches.moe_cp_compaction import boundary
from sglang_overlay.patches.moe_cp_compaction.boundary import (
    MEGA_MOE,
    PATCH_ID,
    TENSOR_PARALLEL_MOE,
    TWO_BATCH_OVERLAP,
    MoeCompactionError,
)
from sglang_overlay.patches.moe_cp_compaction.layout import layout_of

__all__ = ["forward_deepep", "refuse_unsupported_at_startup", "unsupported_under_cp"]


def _compact_bound(upstream_bound, count):
    """The forward context's MoE bound for the compact rows: ``count`` where upstream's answers a bound."""

    def bound():
        return None if upstream_bound() is None else count

    return bound


@functools.cache
def _on_compact_rows(original):
    """Upstream's ``forward_deepep`` as ``boundary.forward_deepep`` calls it, stating the compact count
    through the forward context when the call is on the compact rows (the layout has dummy rows).
    One wrapper per original (cached)."""
    from sglang.srt.model_executor.forward_context import forward_context, get_forward_context, has_forward_context

    def call(self, hidden_states, forward_batch, input_ids_global=None):
        layout = layout_of(forward_batch) if forward_batch is not None else None
        if layout is None or not layout.has_dummy_rows or not has_forward_context():
            return original(self, hidden_states, forward_batch, input_ids_global=input_ids_global)
        if hidden_states.shape[0] != layout.num_valid:
            raise MoeCompactionError(
                f"{PATCH_ID}: upstream's forward_deepep was to run on the {layout.num_valid} compact rows of "
                f"{layout} but got {hidden_states.shape[0]} rows; the 0.5.20 boundary and its 0.5.23 port "
                "disagree (a bug of this patch: disable it with "
                f"SGLANG_OVERLAY_DISABLE={PATCH_ID} and report it)."
            )
        ctx = get_forward_context()
        upstream_bound = ctx.moe_num_token_non_padded
        if upstream_bound is not None:
            _, count = layout.device_tensors(hidden_states.device)
            ctx = dataclasses.replace(ctx, moe_num_token_non_padded=_compact_bound(upstream_bound, count))
        with forward_context(ctx):
            return original(self, hidden_states, forward_batch, input_ids_global=input_ids_global)

    return call


def forward_deepep(original, self, hidden_states, forward_batch=None, input_ids_global=None):
    """AROUND ``DeepseekV2MoE.forward_deepep`` (0.5.23)."""
    return boundary.forward_deepep(
        _on_compact_rows(original), self, hidden_states, forward_batch, input_ids_global=input_ids_global
    )


# Start-up refusals: what differs from 0.5.20's messages (boundary.py holds the rest).
MEGA_MOE_0_5_23 = (
    f"{MEGA_MOE} (DeepGEMM MegaMoE, or on ROCm with SGLANG_AMD_USE_FLYDSL_MEGA_MOE=1 aiter MegaMoEv2; "
    "select an all-to-all backend that runs forward_deepep, such as --moe-a2a-backend deepep)"
)
BREAKABLE_CP_PREFILL_GRAPHS_0_5_23 = (
    "breakable CUDA graphs capture context-parallel prefill here (prefill CUDA graph backend 'breakable', "
    "which sglang 0.5.23 selects by default where layers/cp/bcg:supports_prefill_cp_bcg holds: "
    "--enable-prefill-cp with --cp-strategy zigzag and the trtllm_mha prefill attention backend, or "
    "--cp-strategy interleave with DSA attention): gate, top-k and this patch's gather and scatter are "
    "captured into graph segments, and a replay re-runs only those segments and the DeepEP all-to-all (the "
    "one eager break), not this patch's Python, on live batches padded to the captured CP-local rows, so "
    "dummy rows would reach gate, top-k and DeepEP (set --cuda-graph-backend-prefill disabled)"
)


def _captures_cp_prefill_with_breakable_graphs() -> bool:
    """``PrefillCudaGraphRunner.__init__``'s ``enable_cp_bcg_capture`` on 0.5.23: a breakable backend
    (``resolve_prefill_backend``) and ``supports_prefill_cp_bcg`` on the server args."""
    from sglang.srt.layers.cp.bcg import supports_prefill_cp_bcg
    from sglang.srt.model_executor.cuda_graph_config import Backend
    from sglang.srt.runtime_context import get_exec, get_server_args

    config = get_exec().graph.cuda_graph_config
    backend = config.prefill.backend if config is not None else Backend.BREAKABLE
    return backend == Backend.BREAKABLE and bool(supports_prefill_cp_bcg(get_server_args()))


def _forward_normal_backend(backend) -> str:
    """Why a MoE whose a2a backend does not run ``forward_deepep`` is refused (``--moe-a2a-backend none``:
    0.5.20's message; pplx, flashinfer_megamoe, ascend_tp, customized: their own)."""
    if backend.is_none():
        return TENSOR_PARALLEL_MOE
    return (
        f"the MoE a2a backend '{backend.value}' (--moe-a2a-backend {backend.value}) runs forward_normal, "
        "not forward_deepep, which this patch does not compact (select an all-to-all backend that runs "
        "forward_deepep, such as --moe-a2a-backend deepep)"
    )


def unsupported_under_cp(moe) -> list[str]:
    """The reasons this MoE layer's configuration would let CP dummy rows past the boundary (0.5.23)."""
    from sglang.srt.layers.moe.utils import get_moe_a2a_backend
    from sglang.srt.runtime_context import get_exec

    backend = get_moe_a2a_backend()
    runs_deepep = bool(moe._enable_a2a_moe)  # upstream's own choice of forward_deepep (DeepseekV2MoE.forward)
    runs_mega = backend.is_megamoe()
    checks = (
        (runs_deepep and get_exec().overlap.enable_two_batch_overlap, lambda: TWO_BATCH_OVERLAP),
        (runs_mega, lambda: MEGA_MOE_0_5_23),
        (not (runs_deepep or runs_mega), lambda: _forward_normal_backend(backend)),
        (_captures_cp_prefill_with_breakable_graphs(), lambda: BREAKABLE_CP_PREFILL_GRAPHS_0_5_23),
    )
    return [reason() for hit, reason in checks if hit]


def refuse_unsupported_at_startup(result, self, *args, **kwargs):
    """AFTER ``DeepseekV2MoE.__init__`` (0.5.23): refuse MoE configurations that bypass the boundary under CP."""
    return boundary.refuse_under_cp(self, unsupported_under_cp)
