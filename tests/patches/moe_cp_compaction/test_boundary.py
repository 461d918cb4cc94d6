"""The shared MoE boundary (``moe_cp_compaction.boundary.run_on_valid_rows``) on every release, without either
release's classes: a plain function stands in for upstream's ``forward_deepep``, a namespace for the batch.

What each release adds (how its top-k reads the count) is tested in its folder on upstream's own layer."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout
from sglang_overlay.patches.moe_cp_compaction.boundary import run_on_valid_rows
from sglang_overlay.patches.moe_cp_compaction.errors import MoeCompactionError
from sglang_overlay.patches.moe_cp_compaction.producers import lane_slot_layout
from sglang_overlay.patches.moe_cp_compaction.rows import compact_rows, restore_rows


class Upstream:
    """Records what it got; returns its rows times two (a per-row MoE)."""

    def __init__(self, fail=False):
        self.calls, self.fail = [], fail

    def __call__(self, moe, hidden_states, forward_batch, input_ids_global=None):
        self.calls.append(
            dict(
                rows=hidden_states.clone(),
                batch=forward_batch,
                count=forward_batch and forward_batch.num_token_non_padded,
                ids=input_ids_global,
            )
        )
        if self.fail:
            raise RuntimeError("expert failure")
        return hidden_states * 2


def batch_with(layout, count=torch.tensor(6, dtype=torch.int32)):
    batch = SimpleNamespace(num_token_non_padded=count)
    attach_layout(batch, layout)
    return batch


def test_dummy_rows_never_reach_upstream_and_come_back_as_zeros():
    layout = lane_slot_layout([5, 2, 3], 2, 1)  # rows 2 and 5 dummy
    x = torch.arange(12.0).reshape(6, 2)
    batch, upstream = batch_with(layout), Upstream()
    out = run_on_valid_rows(upstream, None, x, batch)
    assert torch.equal(upstream.calls[0]["rows"], x[[0, 1, 3, 4]])
    assert int(upstream.calls[0]["count"]) == 4  # the compact count, stated in the batch for the call
    assert torch.equal(out[[0, 1, 3, 4]], x[[0, 1, 3, 4]] * 2) and not out[[2, 5]].any()
    assert int(batch.num_token_non_padded) == 6  # restored


def test_without_a_layout_or_dummy_rows_upstream_runs_unchanged():
    """Upstream gets the very batch and hash-routing ids it was called with (a hash layer: nothing compacted)."""
    x, ids, hash_layer = torch.ones(4, 2), torch.arange(4), SimpleNamespace(is_hash=True)
    for batch in (None, SimpleNamespace(num_token_non_padded=None), batch_with(lane_slot_layout([4], 1, 0))):
        upstream = Upstream()
        assert torch.equal(run_on_valid_rows(upstream, hash_layer, x, batch, input_ids_global=ids), x * 2)
        call = upstream.calls[0]
        assert call["rows"].shape == (4, 2) and call["batch"] is batch and call["ids"] is ids


def test_count_scope_wraps_only_the_compact_call_and_a_none_count_stays_none():
    entered = []

    @contextmanager
    def scope(count):
        entered.append(int(count))
        yield

    x = torch.ones(6, 2)
    run_on_valid_rows(Upstream(), None, x[:4], batch_with(lane_slot_layout([4], 1, 0)), count_scope=scope)
    assert entered == []
    upstream = Upstream()
    run_on_valid_rows(upstream, None, x, batch_with(lane_slot_layout([5, 2, 3], 2, 1), count=None), count_scope=scope)
    assert entered == [4] and upstream.calls[0]["count"] is None


def test_hash_routing_ids_are_compacted_in_step_and_the_count_is_restored_when_upstream_raises():
    layout = lane_slot_layout([5, 2, 3], 2, 1)
    batch, upstream = batch_with(layout), Upstream(fail=True)
    saved = batch.num_token_non_padded
    with pytest.raises(RuntimeError, match="expert failure"):
        run_on_valid_rows(
            upstream, SimpleNamespace(is_hash=True), torch.ones(6, 2), batch, input_ids_global=torch.arange(6)
        )
    assert upstream.calls[0]["ids"].tolist() == [0, 1, 3, 4] and batch.num_token_non_padded is saved


def test_hash_routing_ids_are_compacted_only_for_a_hash_layer_that_has_them():
    """A layer without hash routing gets the ids as given (DeepSeek-V4 passes the batch's ids to every layer,
    not this rank's rows); a hash layer called without ids gets none."""
    layout, ids = lane_slot_layout([5, 2, 3], 2, 1), torch.arange(10)
    for layer, given, seen in ((SimpleNamespace(is_hash=False), ids, ids), (SimpleNamespace(is_hash=True), None, None)):
        upstream = Upstream()
        run_on_valid_rows(upstream, layer, torch.ones(6, 2), batch_with(layout), input_ids_global=given)
        assert upstream.calls[0]["ids"] is seen and upstream.calls[0]["rows"].shape == (4, 2)


def test_hash_routing_ids_of_another_row_count_fail_loudly_by_name():
    with pytest.raises(MoeCompactionError, match="^moe-cp-compaction: input_ids_global has 10 rows but the forward"):
        run_on_valid_rows(
            Upstream(), SimpleNamespace(is_hash=True), torch.ones(6, 2), batch_with(lane_slot_layout([5, 2, 3], 2, 1)),
            input_ids_global=torch.arange(10),
        )  # fmt: skip


def test_rows_that_are_not_the_layouts_fail_loudly():
    with pytest.raises(MoeCompactionError, match="has 7 rows but the forward's lane-slot layout has 6 CP-local rows"):
        run_on_valid_rows(Upstream(), None, torch.ones(7, 2), batch_with(lane_slot_layout([5, 2, 3], 2, 1)))


def test_compact_then_restore_is_the_identity_on_valid_rows():
    x = torch.randn(6, 3, dtype=torch.float64)
    index = torch.tensor([0, 2, 5])
    back = restore_rows(compact_rows(x, index), index, 6)
    assert back.dtype == x.dtype and torch.equal(back[index], x[index]) and not back[[1, 3, 4]].any()
