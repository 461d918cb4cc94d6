"""moe-cp-compaction's boundary on sglang >= 0.5.23 (``moe_cp_compaction.forward_context.forward``) on upstream's real
CP path: a ``DeepseekV2MoE`` built by upstream's own ``__init__``, upstream's strategy objects, ForwardBatch, CP
padding and forward context; stand-ins only for DeepEP and the CP world's group handles
(tests/patches/moe_cp_compaction/forward_context/standins.py). One process plays each CP rank in turn.

The hooks are called the way SGLang's HookRegistry calls them (AROUND: ``hook(original, self, ...)`` with
upstream's own ``forward_deepep`` as ``original``; AFTER: ``hook(result, self, ...)`` after upstream's own
constructor). What upstream's unhooked ``forward_deepep`` does to the padding rows is recorded once, by the
patch's "still needed?" probe (tests/patches/moe_cp_compaction/test_probe.py); these tests assert the patched
path, with upstream's output as the reference for the valid rows. Collected only where sglang >= 0.5.23.
"""

from __future__ import annotations

import pytest
import torch

from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout
from sglang_overlay.patches.moe_cp_compaction.boundary import run_on_valid_rows
from sglang_overlay.patches.moe_cp_compaction.errors import MoeCompactionError
from sglang_overlay.patches.moe_cp_compaction.forward_context import forward
from sglang_overlay.patches.moe_cp_compaction.op_path import refuse_dummy_rows_in_op_path
from sglang_overlay.patches.moe_cp_compaction.producers import lane_slot_layout, lane_slot_tokens
from tests.patches.moe_cp_compaction.forward_context.standins import (
    cp_rank_scope,
    eager_forward_context,
    prepare_cp_rank,
)
from tests.support.moe_standins import MoeShape

HIDDEN = MoeShape().hidden
CASES = [(2, [5, 9, 7]), (4, [9, 13, 11])]  # uneven: every rank's shard is padded, by different amounts
RANKS = [pytest.param(cp, lens, r, id=f"cp{cp}-rank{r}") for cp, lens in CASES for r in range(cp)]
TOL = dict(rtol=1e-5, atol=1e-5)


def _reset(moe):
    rec = moe["rec"]
    rec.gate.clear(), rec.shared.clear(), rec.topk.clear()
    moe["bounds"].clear()
    moe["layer"].experts.dispatcher.received.clear()


def _hooked(moe, hook=None):
    """``DeepseekV2MoE.forward_deepep`` as the HookRegistry installs the AROUND hook (default: this release's)."""
    hook = hook or forward.forward_deepep

    def forward_deepep(self, hidden_states, forward_batch=None, input_ids_global=None):
        return hook(moe["upstream"], self, hidden_states, forward_batch, input_ids_global)

    return forward_deepep


def _run(moe, path, local, batch, *, context=True):
    """One forward_deepep call of ``path`` under the eager runner's forward context; what each stage saw."""
    from contextlib import nullcontext

    from sglang.srt.model_executor.forward_context import get_forward_context, has_forward_context

    _reset(moe)
    paths = {"patched": _hooked(moe), "upstream": moe["upstream"], "batch-count-only": _hooked(moe, run_on_valid_rows)}
    fn = paths[path]
    with eager_forward_context(batch) if context else nullcontext(), torch.no_grad():
        before = get_forward_context() if has_forward_context() else None
        out = fn(moe["layer"], local, batch)
        after = get_forward_context() if has_forward_context() else None
    rec, received = moe["rec"], moe["layer"].experts.dispatcher.received
    return dict(
        out=out, context_restored=before is after,
        gate=[g.shape[0] for g in rec.gate], shared=[s.shape[0] for s in rec.shared],
        topk=[t["hidden_states"].shape[0] for t in rec.topk], bounds=list(moe["bounds"]),
        routed=[int((d["topk_ids"] >= 0).any(dim=1).sum()) for d in received],
        dispatched=[d["hidden_states"] for d in received],
    )  # fmt: skip


def _cp_case(strategy, cp, lens, rank):
    x = torch.randn(sum(lens), HIDDEN, generator=torch.Generator().manual_seed(sum(lens) + cp))
    return cp_rank_scope(strategy, cp, rank), x


# --------------------------------------------------------------------------- the boundary


@pytest.mark.parametrize("strategy", ["interleave", "zigzag"])
@pytest.mark.parametrize("cp,lens,rank", RANKS)
def test_only_valid_rows_reach_gate_topk_and_dispatch(moe, strategy, cp, lens, rank):
    scope, x = _cp_case(strategy, cp, lens, rank)
    with scope as strat:
        batch, local, dummy = prepare_cp_rank(strat, lens, x)
        valid = batch.attn_cp_metadata.per_rank_logical_token[rank]
        assert int(dummy.sum()) == local.shape[0] - valid > 0  # this shard is padded (at its end)
        ntnp = batch.num_token_non_padded
        seen = _run(moe, "patched", local, batch)
    # gate rows == shared-expert rows == top-k rows == rows with ids >= 0 == dispatched rows == valid rows
    assert seen["gate"] == seen["shared"] == seen["topk"] == seen["routed"] == [valid]
    assert torch.equal(seen["dispatched"][0], local[~dummy])
    assert seen["bounds"] == [valid]  # the count top-k read from the forward context: the compact rows
    assert seen["context_restored"] and batch.num_token_non_padded is ntnp


@pytest.mark.parametrize("strategy", ["interleave", "zigzag"])
@pytest.mark.parametrize("cp,lens,rank", RANKS)
def test_valid_rows_equal_upstream_and_padding_rows_are_restored_as_zeros(moe, strategy, cp, lens, rank):
    scope, x = _cp_case(strategy, cp, lens, rank)
    with scope as strat:
        batch, local, dummy = prepare_cp_rank(strat, lens, x)
        assert torch.count_nonzero(local[dummy]) == 0  # pad_local_rows pads with zeros ...
        local[dummy] = 100.0  # ... garbage instead: whatever the padding holds, the output's dummy rows are zero
        expected = _run(moe, "upstream", local, batch)["out"]
        out = _run(moe, "patched", local, batch)["out"]
    assert out.shape == local.shape and out.dtype == local.dtype and out.device == local.device
    torch.testing.assert_close(out[~dummy], expected[~dummy], **TOL)
    assert torch.count_nonzero(out[dummy]) == 0  # the padded layout, dummy rows zero (as on 0.5.20)
    assert not dummy[: int((~dummy).sum())].any()  # upstream's CP padding: a suffix of the shard


def _attached_layout_case(moe, path):
    """A producer's layout (``attach_layout``; here the lane-slot layout of CP shared-KV compute padding, padded
    to 5 rows) with 4 valid rows on rank 0, where interleave's top-k bound is the strategy's
    ``per_rank_logical_token[0]`` = 3."""
    lens = [3, 3]
    layout = lane_slot_layout(lens, 2, 0, num_rows=5)
    tokens = lane_slot_tokens(lens, 2, 0)
    x = torch.randn(sum(lens), HIDDEN, generator=torch.Generator().manual_seed(5))
    with cp_rank_scope("interleave", 2, 0) as strat:
        batch, _, _ = prepare_cp_rank(strat, lens, x)
        assert batch.attn_cp_metadata.per_rank_logical_token[0] == 3
        attach_layout(batch, layout)
        local = torch.cat([x[tokens], torch.full((1, HIDDEN), 100.0)])  # 4 lane-slot rows, 1 dummy row
        seen = _run(moe, path, local, batch)
    assert (layout.num_rows, layout.num_valid) == (5, 4)
    return seen, local


def test_an_attached_layout_sets_the_bound_top_k_reads_under_interleave(moe):
    """The count goes through the forward context, so top-k's bound is the layout's 4 valid rows."""
    seen, local = _attached_layout_case(moe, "patched")
    assert seen["gate"] == seen["topk"] == seen["routed"] == seen["bounds"] == [4]
    assert torch.equal(seen["dispatched"][0], local[:4])


def test_failing_first_the_rejected_batch_count_alone_masks_the_fourth_valid_row_under_interleave(moe):
    """Failing-first for the rejected alternative (the shared boundary alone, swapping
    ``forward_batch.num_token_non_padded``): interleave's top-k bound ignores it, stays 3 and masks the fourth
    valid row (ids -1: no experts). The test above passes only because the count goes through the context."""
    seen, _ = _attached_layout_case(moe, "batch-count-only")
    assert seen["gate"] == seen["topk"] == [4]
    assert seen["bounds"] == seen["routed"] == [3]


@pytest.mark.parametrize("strategy", ["interleave", "zigzag"])
def test_without_a_forward_context_the_compact_rows_still_run_alone(moe, strategy):
    """Callers outside a runner (no forward context): top-k has no bound, the compact rows need none."""
    scope, x = _cp_case(strategy, 2, [5, 9, 7], 1)
    with scope as strat:
        batch, local, dummy = prepare_cp_rank(strat, [5, 9, 7], x)
        expected = _run(moe, "upstream", local, batch)["out"]
        seen = _run(moe, "patched", local, batch, context=False)
    valid = int((~dummy).sum())
    assert seen["gate"] == seen["topk"] == seen["routed"] == [valid] and seen["bounds"] == [None]
    torch.testing.assert_close(seen["out"][~dummy], expected[~dummy], **TOL)
    assert torch.count_nonzero(seen["out"][dummy]) == 0


def test_without_cp_or_padding_upstream_runs_unchanged(moe):
    """No CP metadata, and a CP shard without padding rows: the same calls, bounds and output as upstream."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    x = torch.randn(6, HIDDEN, generator=torch.Generator().manual_seed(3))
    plain = ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=1, input_ids=torch.arange(6), req_pool_indices=torch.arange(1),
        seq_lens=torch.tensor([6]), out_cache_loc=torch.arange(6), seq_lens_sum=6,
    )  # fmt: skip
    plain.num_token_non_padded = torch.tensor(6, dtype=torch.int32)
    seen = [_run(moe, path, x, plain) for path in ("upstream", "patched")]
    with cp_rank_scope("interleave", 2, 0) as strat:
        batch, local, dummy = prepare_cp_rank(strat, [4, 8], torch.randn(12, HIDDEN))
        assert not dummy.any()
        seen += [_run(moe, path, local, batch) for path in ("upstream", "patched")]
    for upstream, patched in (seen[:2], seen[2:]):
        assert torch.equal(upstream["out"], patched["out"])
        for key in ("gate", "shared", "topk", "bounds", "routed"):
            assert upstream[key] == patched[key], key


def test_context_and_count_are_restored_when_the_moe_raises(moe, monkeypatch):
    from sglang.srt.model_executor.forward_context import get_forward_context

    def broken(*args, **kwargs):
        raise RuntimeError("expert failure")

    monkeypatch.setattr(moe["layer"].experts, "run_moe_core", broken)
    scope, x = _cp_case("interleave", 2, [5, 9, 7], 1)
    with scope as strat:
        batch, local, _ = prepare_cp_rank(strat, [5, 9, 7], x)
        ntnp = batch.num_token_non_padded
        with eager_forward_context(batch), torch.no_grad():
            before = get_forward_context()
            with pytest.raises(RuntimeError, match="expert failure"):
                _hooked(moe)(moe["layer"], local, batch)
            assert get_forward_context() is before
    assert batch.num_token_non_padded is ntnp


def test_wrong_row_count_fails_loudly(moe):
    scope, x = _cp_case("zigzag", 2, [5, 9, 7], 0)
    with scope as strat:
        batch, local, _ = prepare_cp_rank(strat, [5, 9, 7], x)
        with eager_forward_context(batch), pytest.raises(MoeCompactionError) as info:
            _hooked(moe)(moe["layer"], torch.cat([local, local]), batch)
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

    scope, x = _cp_case("interleave", 2, [5, 9, 7], 1)
    with scope as strat:
        batch, local, _ = prepare_cp_rank(strat, [5, 9, 7], x)
        ntnp = batch.num_token_non_padded
        with eager_forward_context(batch), torch.no_grad(), enable_breakable_cuda_graph():
            before = get_forward_context()
            with pytest.raises(MoeCompactionError) as info:
                _hooked(moe)(moe["layer"], local, batch)
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
    scope, x = _cp_case("zigzag", 2, [5, 9, 7], 1)
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


def test_the_release_hook_hands_hash_routing_ids_to_the_shared_boundary():
    """``forward.forward_deepep`` passes ``input_ids_global`` on: compacted in step with the rows for a hash layer
    with dummy rows, as given without a layout. A recording function stands in for upstream's forward_deepep."""
    from types import SimpleNamespace

    seen = []

    def original(self, hidden_states, forward_batch, input_ids_global=None):
        seen.append(input_ids_global)
        return hidden_states

    layer, ids = SimpleNamespace(is_hash=True), torch.arange(6)
    batch = SimpleNamespace(num_token_non_padded=torch.tensor(6, dtype=torch.int32))
    attach_layout(batch, lane_slot_layout([5, 2, 3], 2, 1))  # rows 2 and 5 dummy
    forward.forward_deepep(original, layer, torch.ones(6, 2), batch, input_ids_global=ids)
    forward.forward_deepep(original, layer, torch.ones(6, 2), None, input_ids_global=ids)
    assert seen[0].tolist() == [0, 1, 3, 4] and seen[1] is ids


def test_the_compact_bound_answers_none_where_upstreams_answers_none():
    """Upstream's getter is resolved per call and may answer None (no padded rows stated): the compact bound
    answers None then, and the compact count where upstream answers a bound; the context comes back after."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context, get_forward_context

    from tests.patches.moe_cp_compaction.forward_context.standins import AttnBackendStandIn

    count, answer = torch.tensor(4, dtype=torch.int32), [None]
    ctx = ForwardContext(attn_backend=AttnBackendStandIn(), moe_num_token_non_padded=lambda: answer[0])
    with forward_context(ctx):
        with forward.compact_count_in_context(count):
            bound = get_forward_context().moe_num_token_non_padded
            assert bound() is None
            answer[0] = torch.tensor(6, dtype=torch.int32)
            assert bound() is count
        assert get_forward_context() is ctx
