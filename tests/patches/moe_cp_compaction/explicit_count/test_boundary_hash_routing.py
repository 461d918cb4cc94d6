"""Hash-routing MoE layers under the boundary (patch moe-cp-compaction, sglang < 0.5.23): ``input_ids_global``
compacted in step with the rows, handed on as given where the boundary steps aside (no CP, an all-valid layout),
refused at another row count, and ignored by a layer without hash routing.

Invariant: a hash layer's ids always describe the rows its hidden states hold. Cost: in-process, a hash layer
built per test (HashTopK's torch path: the fused one is GPU-only).
"""

import pytest
import torch

from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout, layout_of
from sglang_overlay.patches.moe_cp_compaction.errors import MoeCompactionError
from sglang_overlay.patches.moe_cp_compaction.producers import lane_slot_layout, lane_slot_tokens
from tests.patches.moe_cp_compaction.explicit_count.boundary_cases import HIDDEN, TOL, reset
from tests.patches.moe_cp_compaction.explicit_count.standins import build_deepseek_moe, lane_slot_case
from tests.support.moe_standins import MoeShape, make_forward_batch, reference_moe


def test_hash_routing_ids_are_compacted_in_step(env, monkeypatch):
    monkeypatch.setenv("SGLANG_OPT_USE_FUSED_HASH_TOPK", "0")  # HashTopK's torch path (the fused one is GPU-only)
    moe, rec = build_deepseek_moe(hash_routing=True, seed=3)
    assert moe.is_hash
    lens, n, r = [5, 2, 3, 6], 2, 1
    local, layout, batch, valid_x = lane_slot_case(env, lens, n, r)
    # HashTopK masks rows past num_token_non_padded with a Triton kernel (no CPU driver):
    # run as with moe_ep_size == 1, where upstream leaves it None and so does the boundary.
    batch.num_token_non_padded = None
    tok = lane_slot_tokens(lens, n, r)
    token_ids = torch.randint(0, MoeShape().vocab, (sum(lens),), generator=torch.Generator().manual_seed(4))
    ids_global = torch.where(tok >= 0, token_ids[tok.clamp(min=0)], torch.full_like(tok, 7))
    with torch.no_grad():
        out = moe(local, batch, input_ids_global=ids_global)
        ref = reference_moe(moe, valid_x, input_ids=token_ids[tok[tok >= 0]])
    mask = layout.valid_mask()
    assert torch.equal(rec.topk[0]["input_ids"], ids_global[mask])
    assert rec.topk[0]["num_token_non_padded"] is None
    torch.testing.assert_close(out[mask], ref, **TOL)
    assert torch.count_nonzero(out[~mask]) == 0


@pytest.mark.parametrize("case", ["no-cp", "all-valid-lane-slots"])
def test_hash_routing_ids_reach_upstream_where_the_boundary_steps_aside(env, monkeypatch, case):
    """Without CP, or with a layout without dummy rows, upstream runs unchanged: a hash layer
    gets its input_ids_global as given."""
    monkeypatch.setenv("SGLANG_OPT_USE_FUSED_HASH_TOPK", "0")  # HashTopK's torch path
    moe, rec = build_deepseek_moe(hash_routing=True, seed=3)
    lens = [4, 8, 2]
    g = torch.Generator().manual_seed(5)
    token_ids = torch.randint(0, MoeShape().vocab, (sum(lens),), generator=g)
    x = torch.randn(sum(lens), HIDDEN, generator=g)
    batch = make_forward_batch(lens, None)
    batch.num_token_non_padded = None  # HashTopK's padded-row mask is a Triton kernel (see above)
    if case == "all-valid-lane-slots":
        tok = lane_slot_tokens(lens, 2, 1)
        attach_layout(batch, lane_slot_layout(lens, 2, 1))
        assert not layout_of(batch).has_dummy_rows
        x, token_ids = x[tok], token_ids[tok]
    with torch.no_grad():
        out = moe(x, batch, input_ids_global=token_ids)
        ref = reference_moe(moe, x, input_ids=token_ids)
    assert torch.equal(rec.topk[0]["input_ids"], token_ids)
    torch.testing.assert_close(out, ref, **TOL)


def test_hash_routing_ids_of_another_row_count_fail_loudly(env, monkeypatch):
    monkeypatch.setenv("SGLANG_OPT_USE_FUSED_HASH_TOPK", "0")
    moe, _ = build_deepseek_moe(hash_routing=True, seed=3)
    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    batch.num_token_non_padded = None
    with pytest.raises(MoeCompactionError) as info:
        moe(local, batch, input_ids_global=torch.zeros(10, dtype=torch.long))  # the batch's, not the rank's
    assert str(info.value) == (
        "moe-cp-compaction: input_ids_global has 10 rows but the forward's lane-slot layout has 6 CP-local "
        "rows (4 valid). The MoE input is not this rank's CP-local rows (e.g. a moe-cp all-gather before "
        "MoE), which this patch does not support; disable it with SGLANG_OVERLAY_DISABLE=moe-cp-compaction "
        "or change the parallel layout."
    )
    assert batch.num_token_non_padded is None


def test_a_layer_without_hash_routing_ignores_input_ids_global(env):
    """DeepSeek-V4 passes input_ids_global to every MoE layer; upstream reads it in hash layers
    only, and so does the boundary: in another layer it is neither checked nor compacted."""
    reset(env)
    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    assert not env["moe"].is_hash
    with torch.no_grad():
        expected = env["moe"](local, batch)
        out = env["moe"](local, batch, input_ids_global=torch.arange(10))  # not the rank's 6 rows
    assert torch.equal(out, expected)
