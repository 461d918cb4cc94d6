"""What the MoE boundary (patch moe-cp-compaction, sglang < 0.5.23) costs and counts on upstream's own
DeepseekV2MoE: the gather index prepared once per forward for every MoE layer, the identity paths (no CP, an
all-valid layout, CP without padding) issuing exactly upstream's tensor ops, and upstream's expert-distribution
recorder counting valid rows only.

Invariant: not one tensor op more than upstream where there is nothing to compact; statistics count each valid
row's top-k once. Cost: in-process, a few forwards under torch dispatch modes and one recorder per path.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout, layout_of
from sglang_overlay.patches.moe_cp_compaction.producers import lane_slot_layout
from tests.patches.moe_cp_compaction.explicit_count.boundary_cases import HIDDEN, forward_path, reset
from tests.patches.moe_cp_compaction.explicit_count.standins import lane_slot_case
from tests.support.moe_standins import MoeShape, make_forward_batch


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
            outs.append(forward_path(env, path, x, batch))
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
                    forward_path(env, path, local, batch)
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
