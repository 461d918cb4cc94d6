"""The MoE boundary (patch moe-cp-compaction) on upstream DeepseekV2MoE.forward_deepep of sglang < 0.5.23: which
rows reach gate, shared experts, top-k and the dispatcher, and what comes back.

The module is upstream's own (real gate, grouped top-k, shared experts); only DeepEP's dispatcher and experts are
CPU stand-ins (tests/support/moe_standins.py). The overlay is applied in-process (conftest.py's ``env``; its
``upstream`` is the unwrapped original). Lane-slot batches, random ones (hypothesis), upstream's real CP padding
on every rank, and the edge cases (empty, no valid row, all dummy, one row).
Invariant: valid rows equal a dense per-row reference, dummy rows come back exactly zero, only valid rows reach
any stage. Cost: in-process, one layer forward per case (25 hypothesis examples).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.patches.moe_cp_compaction.explicit_count.boundary_cases import HIDDEN, TOL, forward_path, reset
from tests.patches.moe_cp_compaction.explicit_count.standins import lane_slot_case
from tests.support.moe_standins import make_forward_batch, reference_moe

CASES = [([5, 2, 3], 2, 1), ([5, 2, 3], 2, 0), ([7, 1, 30, 4], 4, 3), ([13, 6], 3, 2), ([9] * 8, 8, 5)]


@pytest.mark.parametrize("lens,n,r", CASES)
def test_valid_rows_match_dense_reference_and_dummy_rows_are_zero(env, lens, n, r):
    reset(env)
    local, layout, batch, valid_x = lane_slot_case(env, lens, n, r)
    with torch.no_grad():
        out = env["moe"](local, batch)
        ref = reference_moe(env["moe"], valid_x)
    valid = layout.valid_mask()
    assert out.shape == local.shape and out.dtype == local.dtype and out.device == local.device
    torch.testing.assert_close(out[valid], ref, **TOL)
    assert torch.count_nonzero(out[~valid]) == 0
    # gate, shared experts, top-k and dispatcher saw exactly the valid rows
    rec, seen = env["rec"], local[valid]
    assert len(rec.gate) == len(rec.shared) == len(rec.topk) == 1
    assert torch.equal(rec.gate[0], seen) and torch.equal(rec.shared[0], seen)
    assert torch.equal(rec.topk[0]["hidden_states"], seen)
    assert int(rec.topk[0]["num_token_non_padded"]) == layout.num_valid
    (dispatched,) = env["moe"].experts.dispatcher.received
    assert torch.equal(dispatched["hidden_states"], seen)
    assert dispatched["topk_ids"].shape[0] == layout.num_valid
    assert int(batch.num_token_non_padded) == local.shape[0]  # restored for the rest of the forward


@settings(max_examples=25, deadline=None)
@given(
    lens=st.lists(st.integers(min_value=0, max_value=40), min_size=0, max_size=12),
    n=st.sampled_from([1, 2, 3, 4, 8]),
    data=st.data(),
)
def test_random_lane_slot_batches_match_the_reference(env, lens, n, data):
    r = data.draw(st.integers(min_value=0, max_value=n - 1), label="rank")
    local, layout, batch, valid_x = lane_slot_case(env, lens, n, r, seed=sum(lens) + n)
    with torch.no_grad():
        out = env["moe"](local, batch)
        ref = reference_moe(env["moe"], valid_x)
    mask = layout.valid_mask()
    assert out.shape == local.shape
    torch.testing.assert_close(out[mask], ref, **TOL)
    assert torch.count_nonzero(out[~mask]) == 0


def test_gate_and_topk_never_see_a_dummy_row(env):
    """Upstream's own forward_deepep hands them every row: the patch's probe records that (test_probe.py)."""
    reset(env)
    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    with torch.no_grad():
        forward_path(env, "patched", local, batch)
    assert torch.equal(env["rec"].gate[0], local[layout.valid_mask()])
    assert torch.equal(env["rec"].topk[0]["hidden_states"], local[layout.valid_mask()])


@pytest.mark.parametrize("strategy", ["interleave", "zigzag"])
def test_upstream_cp_padding_is_compacted_on_every_rank(env, strategy):
    """Real upstream CP metadata, padding and sharding; no layout attached."""
    from sglang.srt.layers.cp.interleave import InterleaveCPStrategy
    from sglang.srt.layers.cp.padding import pad_logical_token_to_physical
    from sglang.srt.layers.cp.zigzag import ZigzagCPStrategy
    from sglang.srt.runtime_context import get_parallel

    cls = {"interleave": InterleaveCPStrategy, "zigzag": ZigzagCPStrategy}[strategy]
    lens, n = [7, 9, 11], 4
    x = torch.randn(sum(lens), HIDDEN, generator=torch.Generator().manual_seed(1))
    for r in range(n):
        reset(env)
        with get_parallel().override(attn_cp_size=n, attn_cp_rank=r):
            cp = cls(cp_size=n)
            batch = make_forward_batch(lens, sum(lens))
            batch.attn_cp_metadata = cp.build_metadata(sum(lens), lens, lens)
            pad_logical_token_to_physical(batch.attn_cp_metadata)
            local = cp.shard_hidden_states(x, batch)
            with torch.no_grad():
                out = env["moe"](local, batch)
            logical = batch.attn_cp_metadata.per_rank_logical_token[r]
        assert local.shape[0] > logical  # this case pads every rank
        if strategy == "interleave":
            assert torch.equal(local[:logical], x[r::n])
        torch.testing.assert_close(out[:logical], reference_moe(env["moe"], local[:logical]), **TOL)
        assert out.shape == local.shape and torch.count_nonzero(out[logical:]) == 0
        assert env["rec"].gate[0].shape[0] == logical
        assert env["moe"].experts.dispatcher.received[0]["hidden_states"].shape[0] == logical


@pytest.mark.parametrize(
    "lens,n,r,rows,valid",
    [
        ([], 2, 0, 0, 0),  # empty batch
        ([1, 1], 4, 3, 2, 0),  # a rank with no valid rows
        ([1, 1, 1], 4, 2, 3, 0),  # all rows dummy
        ([1], 1, 0, 1, 1),  # one row
        ([1, 2], 2, 1, 2, 1),  # one valid row among dummies
    ],
)
def test_edge_cases(env, lens, n, r, rows, valid):
    reset(env)
    local, layout, batch, valid_x = lane_slot_case(env, lens, n, r)
    assert (layout.num_rows, layout.num_valid) == (rows, valid)
    with torch.no_grad():
        out = env["moe"](local, batch)
    assert out.shape == (rows, HIDDEN) and out.dtype == local.dtype
    mask = layout.valid_mask()
    assert torch.count_nonzero(out[~mask]) == 0
    if valid:
        with torch.no_grad():
            torch.testing.assert_close(out[mask], reference_moe(env["moe"], valid_x), **TOL)
    # the rank still joins the DeepEP dispatch (a collective), with its valid rows only
    (dispatched,) = env["moe"].experts.dispatcher.received
    assert dispatched["hidden_states"].shape[0] == valid
    assert len(env["rec"].gate) == (1 if valid else 0)
