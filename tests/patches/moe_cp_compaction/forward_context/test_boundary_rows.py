"""moe-cp-compaction's boundary on sglang >= 0.5.23 (``moe_cp_compaction.forward_context.forward``) on upstream's real
CP path: which rows reach gate, shared experts, top-k and DeepEP, the bound top-k reads through the forward
context, and the hash-routing ids handed on with the rows.

A ``DeepseekV2MoE`` built by upstream's own ``__init__``, upstream's strategy objects, ForwardBatch, CP padding and
forward context; stand-ins only for DeepEP and the CP world's group handles
(tests/patches/moe_cp_compaction/forward_context/standins.py). One process plays each CP rank in turn; the hooks
are called the way SGLang's HookRegistry calls them (boundary_cases.py). What upstream's unhooked
``forward_deepep`` does to the padding rows is recorded once, by the patch's "still needed?" probe
(tests/patches/moe_cp_compaction/test_probe.py); these tests assert the patched path, with upstream's output as
the reference for the valid rows. Collected only where sglang >= 0.5.23.
Invariant: only valid rows reach any stage, they equal upstream's, padding rows come back zero, and top-k's bound
is the compact count. Cost: in-process, a few layer forwards per case (interleave and zigzag, every rank).
"""

from __future__ import annotations

import pytest
import torch

from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout
from sglang_overlay.patches.moe_cp_compaction.forward_context import forward
from sglang_overlay.patches.moe_cp_compaction.producers import lane_slot_layout, lane_slot_tokens
from tests.patches.moe_cp_compaction.forward_context.boundary_cases import HIDDEN, RANKS, TOL, cp_case, run_path
from tests.patches.moe_cp_compaction.forward_context.standins import cp_rank_scope, prepare_cp_rank


@pytest.mark.parametrize("strategy", ["interleave", "zigzag"])
@pytest.mark.parametrize("cp,lens,rank", RANKS)
def test_only_valid_rows_reach_gate_topk_and_dispatch(moe, strategy, cp, lens, rank):
    scope, x = cp_case(strategy, cp, lens, rank)
    with scope as strat:
        batch, local, dummy = prepare_cp_rank(strat, lens, x)
        valid = batch.attn_cp_metadata.per_rank_logical_token[rank]
        assert int(dummy.sum()) == local.shape[0] - valid > 0  # this shard is padded (at its end)
        ntnp = batch.num_token_non_padded
        seen = run_path(moe, "patched", local, batch)
    # gate rows == shared-expert rows == top-k rows == rows with ids >= 0 == dispatched rows == valid rows
    assert seen["gate"] == seen["shared"] == seen["topk"] == seen["routed"] == [valid]
    assert torch.equal(seen["dispatched"][0], local[~dummy])
    assert seen["bounds"] == [valid]  # the count top-k read from the forward context: the compact rows
    assert seen["context_restored"] and batch.num_token_non_padded is ntnp


@pytest.mark.parametrize("strategy", ["interleave", "zigzag"])
@pytest.mark.parametrize("cp,lens,rank", RANKS)
def test_valid_rows_equal_upstream_and_padding_rows_are_restored_as_zeros(moe, strategy, cp, lens, rank):
    scope, x = cp_case(strategy, cp, lens, rank)
    with scope as strat:
        batch, local, dummy = prepare_cp_rank(strat, lens, x)
        assert torch.count_nonzero(local[dummy]) == 0  # pad_local_rows pads with zeros ...
        local[dummy] = 100.0  # ... garbage instead: whatever the padding holds, the output's dummy rows are zero
        expected = run_path(moe, "upstream", local, batch)["out"]
        out = run_path(moe, "patched", local, batch)["out"]
    assert out.shape == local.shape and out.dtype == local.dtype and out.device == local.device
    torch.testing.assert_close(out[~dummy], expected[~dummy], **TOL)
    assert torch.count_nonzero(out[dummy]) == 0  # the padded layout, dummy rows zero
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
        seen = run_path(moe, path, local, batch)
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
    scope, x = cp_case(strategy, 2, [5, 9, 7], 1)
    with scope as strat:
        batch, local, dummy = prepare_cp_rank(strat, [5, 9, 7], x)
        expected = run_path(moe, "upstream", local, batch)["out"]
        seen = run_path(moe, "patched", local, batch, context=False)
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
    seen = [run_path(moe, path, x, plain) for path in ("upstream", "patched")]
    with cp_rank_scope("interleave", 2, 0) as strat:
        batch, local, dummy = prepare_cp_rank(strat, [4, 8], torch.randn(12, HIDDEN))
        assert not dummy.any()
        seen += [run_path(moe, path, local, batch) for path in ("upstream", "patched")]
    for upstream, patched in (seen[:2], seen[2:]):
        assert torch.equal(upstream["out"], patched["out"])
        for key in ("gate", "shared", "topk", "bounds", "routed"):
            assert upstream[key] == patched[key], key


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
