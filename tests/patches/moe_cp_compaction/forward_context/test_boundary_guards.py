"""moe-cp-compaction's boundary on sglang >= 0.5.23 (``moe_cp_compaction.forward_context.forward``): what it refuses
and restores on upstream's real CP path. The forward context and ``num_token_non_padded`` come back after the MoE
raises; a wrong row count and a breakable CUDA-graph capture through a CP forward fail loudly; the shared BEFORE
hook on ``op_gate`` (the hook of every release) refuses two-batch-overlap ops on a forward with padding rows.

Upstream's own ``DeepseekV2MoE`` and CP path, stand-ins only for DeepEP and the CP world's group handles
(tests/patches/moe_cp_compaction/forward_context/standins.py); the hooks are called the way SGLang's HookRegistry
calls them (boundary_cases.py). Collected only where sglang >= 0.5.23.
Invariant: every refusal names its cause exactly and leaves the context and the batch as they were.
Cost: in-process, one layer forward per test at most.
"""

from __future__ import annotations

import pytest
import torch

from sglang_overlay.patches.moe_cp_compaction.errors import MoeCompactionError
from sglang_overlay.patches.moe_cp_compaction.op_path import refuse_dummy_rows_in_op_path
from tests.patches.moe_cp_compaction.forward_context.boundary_cases import cp_case, hooked
from tests.patches.moe_cp_compaction.forward_context.standins import eager_forward_context, prepare_cp_rank
from tests.support.moe_standins import MoeShape


def test_context_and_count_are_restored_when_the_moe_raises(moe, monkeypatch):
    from sglang.srt.model_executor.forward_context import get_forward_context

    def broken(*args, **kwargs):
        raise RuntimeError("expert failure")

    monkeypatch.setattr(moe["layer"].experts, "run_moe_core", broken)
    scope, x = cp_case("interleave", 2, [5, 9, 7], 1)
    with scope as strat:
        batch, local, _ = prepare_cp_rank(strat, [5, 9, 7], x)
        ntnp = batch.num_token_non_padded
        with eager_forward_context(batch), torch.no_grad():
            before = get_forward_context()
            with pytest.raises(RuntimeError, match="expert failure"):
                hooked(moe)(moe["layer"], local, batch)
            assert get_forward_context() is before
    assert batch.num_token_non_padded is ntnp


def test_wrong_row_count_fails_loudly(moe):
    scope, x = cp_case("zigzag", 2, [5, 9, 7], 0)
    with scope as strat:
        batch, local, _ = prepare_cp_rank(strat, [5, 9, 7], x)
        with eager_forward_context(batch), pytest.raises(MoeCompactionError) as info:
            hooked(moe)(moe["layer"], torch.cat([local, local]), batch)
    assert str(info.value) == (
        "moe-cp-compaction: DeepseekV2MoE.forward_deepep hidden_states has 24 rows but the forward's cp-padding "
        "layout has 12 CP-local rows (11 valid). The MoE input is not this rank's CP-local rows (e.g. a moe-cp "
        "all-gather before MoE), which this patch does not support; disable it with "
        "SGLANG_OVERLAY_DISABLE=moe-cp-compaction or change the parallel layout."
    )


def test_a_breakable_capture_through_a_cp_forward_raises(moe):
    """The shared capture guard on this release's breakable-graph flag (defence in depth behind the refusal)."""
    from sglang.srt.model_executor.forward_context import get_forward_context
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.context import (
        enable_breakable_cuda_graph,
    )

    scope, x = cp_case("interleave", 2, [5, 9, 7], 1)
    with scope as strat:
        batch, local, _ = prepare_cp_rank(strat, [5, 9, 7], x)
        ntnp = batch.num_token_non_padded
        with eager_forward_context(batch), torch.no_grad(), enable_breakable_cuda_graph():
            before = get_forward_context()
            with pytest.raises(MoeCompactionError) as info:
                hooked(moe)(moe["layer"], local, batch)
            assert get_forward_context() is before
    assert str(info.value) == (
        "moe-cp-compaction: a CUDA graph is being captured through a context-parallel forward "
        "(ComputePaddingLayout(source='cp-padding', num_rows=12, num_valid=10)); replay would re-run neither this "
        "patch's gather and scatter nor its choice of rows, so CP dummy rows would reach gate, top-k and DeepEP. "
        "Run CP prefill without prefill CUDA graphs (--cuda-graph-backend-prefill disabled)."
    )
    assert batch.num_token_non_padded is ntnp


# --------------------------------------------------------------------------- BEFORE op_gate (the hook of every release)


def test_two_batch_overlap_ops_refuse_a_cp_forward_with_padding_rows(moe):
    """0.5.23's ``op_gate`` still takes the TBO state with its ``forward_batch``: the shared BEFORE hook applies."""
    from sglang.srt.batch_overlap.operations import _StateDict

    layer = moe["layer"]
    scope, x = cp_case("zigzag", 2, [5, 9, 7], 1)
    with scope as strat:
        batch, local, _ = prepare_cp_rank(strat, [5, 9, 7], x)
        state = _StateDict()
        state.update(dict(forward_batch=batch, hidden_states_mlp_input=local))
        with pytest.raises(MoeCompactionError) as info:
            refuse_dummy_rows_in_op_path(layer, state)
    assert str(info.value) == (
        "moe-cp-compaction: the two-batch-overlap MoE ops (op_gate ... op_output) received a forward with "
        "dummy CP rows (ComputePaddingLayout(source='cp-padding', num_rows=12, num_valid=10)); they are not "
        "compacted. Disable two-batch overlap under context parallelism."
    )
    plain = _StateDict()
    plain.update(dict(forward_batch=object(), hidden_states_mlp_input=local))
    assert refuse_dummy_rows_in_op_path(layer, plain) is None
    with torch.no_grad():
        layer.op_gate(plain)  # upstream's op_gate on 0.5.23, as the hook expects it
    assert plain.router_logits.shape == (local.shape[0], MoeShape().experts)
