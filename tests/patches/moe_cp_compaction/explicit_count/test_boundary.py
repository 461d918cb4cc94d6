"""The MoE boundary (patch moe-cp-compaction) on upstream DeepseekV2MoE.forward_deepep of sglang < 0.5.23.

The module is upstream's own (real gate, grouped top-k, shared experts); only
DeepEP's dispatcher and experts are CPU stand-ins (tests/support/moe_standins.py).
The overlay is applied in-process; ``UPSTREAM`` is the unwrapped original.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout, layout_of
from sglang_overlay.patches.moe_cp_compaction.errors import MoeCompactionError
from sglang_overlay.patches.moe_cp_compaction.producers import lane_slot_layout, lane_slot_tokens
from tests.patches.moe_cp_compaction.explicit_count.standins import build_deepseek_moe, lane_slot_case
from tests.support.moe_standins import MoeShape, make_forward_batch, reference_moe

HIDDEN = MoeShape().hidden
TOL = dict(rtol=1e-5, atol=1e-5)


def reset(env):
    env["rec"].gate.clear(), env["rec"].shared.clear(), env["rec"].topk.clear()
    env["moe"].experts.dispatcher.received.clear()


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


def _forward(env, path, local, batch):
    if path == "patched":
        return env["moe"](local, batch)
    return env["upstream"](env["moe"], local, batch)


def test_gate_and_topk_never_see_a_dummy_row(env):
    """Upstream's own forward_deepep hands them every row: the patch's probe records that (test_probe.py)."""
    reset(env)
    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    with torch.no_grad():
        _forward(env, "patched", local, batch)
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


def test_index_is_prepared_once_per_forward_for_every_moe_layer(env):
    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    seen = []

    class IndexSpy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.index_select.default and args[0].shape[0] == layout.num_rows:
                seen.append(args[2])
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), IndexSpy():
        for _layer in range(3):  # three MoE layers of one forward
            env["moe"](local, batch)
    assert layout_of(batch) is layout and layout.materializations == 1
    assert len(seen) == 3 and all(t is seen[0] for t in seen)
    next_batch = make_forward_batch([5, 2, 3], 6)  # the next forward builds its own
    attach_layout(next_batch, lane_slot_layout([5, 2, 3], 2, 1))
    with torch.no_grad():
        env["moe"](local, next_batch)
    assert layout.materializations == 1 and layout_of(next_batch).materializations == 1


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("case", ["no-cp", "all-valid-lane-slots", "cp-without-padding"])
def test_identity_costs_nothing_at_the_boundary(env, case):
    from types import SimpleNamespace

    lens = [4, 8, 2]
    x = torch.randn(14, HIDDEN)
    batch = make_forward_batch(lens, 14)
    if case == "all-valid-lane-slots":
        x = torch.randn(7, HIDDEN)
        attach_layout(batch, lane_slot_layout(lens, 2, 1))
        assert not layout_of(batch).has_dummy_rows
    elif case == "cp-without-padding":
        batch.attn_cp_metadata = SimpleNamespace(per_rank_actual_token=[14], per_rank_logical_token=[14])
    counts = []
    outs = []
    for path in ("upstream", "patched"):
        counter = OpCounter()
        with torch.no_grad(), counter:
            outs.append(_forward(env, path, x, batch))
        counts.append([str(op) for op in counter.ops])
    assert counts[0] == counts[1]  # not one tensor op more than upstream
    assert torch.equal(outs[0], outs[1])


def _record_expert_counts(env, monkeypatch, path, local, batch):
    """Upstream's expert-distribution recorder ('stat' mode, select-experts gatherer)."""
    import sglang.srt.eplb.expert_distribution as dist
    from sglang.srt.runtime_context import get_exec

    from tests.support.moe_standins import expert_location_metadata

    # stand-ins for the accelerator: where the gatherer allocates, and its cache flush
    monkeypatch.setattr(dist, "get_device", lambda: "cpu")
    monkeypatch.setattr(torch.cpu, "empty_cache", lambda: None, raising=False)
    with get_exec().moe.override(expert_distribution_recorder_mode="stat"):
        recorder = dist.ExpertDistributionRecorder.init_new(expert_location_metadata(2, MoeShape().experts), 0)
        previous = dist.get_global_expert_distribution_recorder()
        dist.set_global_expert_distribution_recorder(recorder)
        try:
            recorder.start_record()
            with recorder.with_forward_pass(0, batch), recorder.with_current_layer(env["moe"].layer_id):
                with torch.no_grad():
                    _forward(env, path, local, batch)
            counts = recorder.dump_record(output_mode="object")["logical_count"]
        finally:
            dist.set_global_expert_distribution_recorder(previous)
    return counts.sum(0)[env["moe"].layer_id]


def test_expert_statistics_count_valid_rows_only(env, monkeypatch):
    local, layout, batch, valid_x = lane_slot_case(env, [7, 1, 30, 4], 4, 3)
    top_k = MoeShape().top_k
    patched = _record_expert_counts(env, monkeypatch, "patched", local, batch)
    assert int(patched.sum()) == top_k * layout.num_valid
    upstream = _record_expert_counts(env, monkeypatch, "upstream", local, batch)
    assert int(upstream.sum()) == top_k * layout.num_rows  # upstream counts the dummy rows too
    reset(env)
    with torch.no_grad():
        env["moe"](local, batch)
    ids = env["moe"].experts.dispatcher.received[0]["topk_ids"].flatten()
    assert torch.equal(patched, torch.bincount(ids.long(), minlength=MoeShape().experts).to(patched.dtype))


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


def test_wrong_row_count_fails_loudly_and_leaves_the_batch_alone(env):
    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    before = batch.num_token_non_padded
    with pytest.raises(MoeCompactionError) as info:
        env["moe"](torch.cat([local, local]), batch)
    assert str(info.value) == (
        "moe-cp-compaction: DeepseekV2MoE.forward_deepep hidden_states has 12 rows but the forward's lane-slot "
        "layout has 6 CP-local rows (4 valid). The MoE input is not this rank's CP-local rows (e.g. a moe-cp "
        "all-gather before MoE), which this patch does not support; disable it with "
        "SGLANG_OVERLAY_DISABLE=moe-cp-compaction or change the parallel layout."
    )
    assert batch.num_token_non_padded is before


def test_num_token_non_padded_is_restored_when_the_moe_raises(env, monkeypatch):
    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    before = batch.num_token_non_padded

    def broken(*args, **kwargs):
        raise RuntimeError("expert failure")

    monkeypatch.setattr(env["moe"].experts, "run_moe_core", broken)
    with pytest.raises(RuntimeError, match="expert failure"):
        env["moe"](local, batch)
    assert batch.num_token_non_padded is before


def test_two_batch_overlap_ops_refuse_dummy_rows(env):
    from sglang.srt.batch_overlap.operations import _StateDict

    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    state = _StateDict()
    state.update(dict(forward_batch=batch, hidden_states_mlp_input=local))
    with pytest.raises(MoeCompactionError) as info:
        env["moe"].op_gate(state)
    assert str(info.value) == (
        "moe-cp-compaction: the two-batch-overlap MoE ops (op_gate ... op_output) received a forward with "
        "dummy CP rows (ComputePaddingLayout(source='lane-slot', num_rows=6, num_valid=4)); they are not "
        "compacted. Disable two-batch overlap under context parallelism."
    )
    plain = _StateDict()
    plain.update(dict(forward_batch=make_forward_batch([5, 2, 3], 10), hidden_states_mlp_input=local))
    with torch.no_grad():
        env["moe"].op_gate(plain)  # upstream's op_gate, unchanged without dummy rows
    assert plain.router_logits.shape == (local.shape[0], MoeShape().experts)


def test_the_plugin_path_hooks_the_boundary_when_the_model_module_is_imported():
    import subprocess
    import sys

    from tests.support.env import REPO, subprocess_env

    code = (
        "from sglang.srt.plugins import load_plugins\n"
        "load_plugins()\n"
        "import sys\n"
        "assert 'sglang.srt.models.deepseek_v2' not in sys.modules\n"
        "import sglang.srt.models.deepseek_v2 as m\n"
        "from sglang_overlay.core.hooking import status\n"
        "print('HOOKED', len(status()['applied']['moe-cp-compaction']), m.DeepseekV2MoE.forward_deepep.__wrapped__.__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "HOOKED 3 forward_deepep" in proc.stdout
