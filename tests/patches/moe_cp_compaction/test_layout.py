"""Compute-padding layouts (patch moe-cp-compaction): properties and both producers, on every release.

How ``layout_of`` reads upstream's own CP metadata: the release folder's boundary tests (``forward_context/``)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout
from sglang_overlay.patches.moe_cp_compaction.errors import LayoutError
from sglang_overlay.patches.moe_cp_compaction.layout import ComputePaddingLayout
from sglang_overlay.patches.moe_cp_compaction.producers import cp_padding_layout, lane_slot_layout, lane_slot_tokens

CP_SIZES = st.sampled_from([1, 2, 3, 4, 8])
BATCHES = st.lists(st.integers(min_value=0, max_value=300), min_size=0, max_size=64)


@settings(max_examples=150, deadline=None)
@given(lens=BATCHES, n=CP_SIZES)
def test_lane_slot_rows_map_one_to_one_onto_the_batch_tokens(lens, n):
    layouts = [lane_slot_layout(lens, n, r) for r in range(n)]
    tokens = [lane_slot_tokens(lens, n, r) for r in range(n)]
    # every rank has the same number of rows: sum of ceil(L_i / N)
    expected_rows = sum(-(-length // n) for length in lens)
    assert {layout.num_rows for layout in layouts} == {expected_rows}
    # the layout's valid rows are exactly the rows that hold a token
    for layout, tok in zip(layouts, tokens):
        assert torch.equal(layout.row_indices(), torch.nonzero(tok >= 0).flatten())
        assert layout.num_valid == int((tok >= 0).sum())
    # over all ranks, valid rows <-> batch tokens is a bijection (no overlap, nothing lost)
    held = torch.cat([tok[layout.row_indices()] for layout, tok in zip(layouts, tokens)])
    assert torch.equal(torch.sort(held).values, torch.arange(sum(lens)))
    # a token sits in lane t mod N of its request, valid slots before dummy slots
    starts = torch.cumsum(torch.tensor([0] + lens), 0)
    for r, tok in enumerate(tokens):
        row = 0
        for i, length in enumerate(lens):
            slots = tok[row : row + -(-length // n)]
            valid = slots[slots >= 0]
            assert torch.equal(valid, starts[i] + r + n * torch.arange(valid.numel()))
            assert bool((slots[valid.numel() :] == -1).all())
            row += slots.numel()


@settings(max_examples=100, deadline=None)
@given(lens=BATCHES, n=CP_SIZES)
def test_all_valid_batch_is_the_identity(lens, n):
    layouts = [lane_slot_layout(lens, n, r) for r in range(n)]
    if all(length % n == 0 for length in lens):
        assert not any(layout.has_dummy_rows for layout in layouts)
        assert all(layout.num_valid == layout.num_rows for layout in layouts)
    else:  # the last lane misses a token of every request whose length N does not divide
        assert layouts[n - 1].has_dummy_rows


def test_lane_slot_diagram_of_the_module_docstring():
    assert lane_slot_tokens([5, 2, 3], 2, 0).tolist() == [0, 2, 4, 5, 7, 9]
    assert lane_slot_tokens([5, 2, 3], 2, 1).tolist() == [1, 3, -1, 6, 8, -1]
    assert lane_slot_layout([5, 2, 3], 2, 1).row_indices().tolist() == [0, 1, 3, 4]
    mask = lane_slot_layout([5, 2, 3], 2, 1).valid_mask()
    assert mask.dtype == torch.bool and mask.tolist() == [True, True, False, True, True, False]


def test_a_request_without_tokens_takes_no_slot():
    assert lane_slot_tokens([3, 0, 2], 2, 0).tolist() == [0, 2, 3]
    assert lane_slot_tokens([3, 0, 2], 2, 1).tolist() == [1, -1, 4]
    assert lane_slot_layout([0, 0], 2, 1).num_rows == 0


def test_lane_slot_extra_rows_and_bad_input():
    layout = lane_slot_layout([4], 2, 0, num_rows=4)  # aligned up with trailing dummies
    assert (layout.num_rows, layout.row_indices().tolist()) == (4, [0, 1])
    with pytest.raises(LayoutError):
        lane_slot_layout([4], 2, 0, num_rows=1)
    with pytest.raises(LayoutError):
        lane_slot_layout([3, -1], 2, 0)
    with pytest.raises(LayoutError):
        lane_slot_layout([3], 2, 2)
    with pytest.raises(LayoutError):
        ComputePaddingLayout(3, torch.tensor([1, 1]), "test")
    with pytest.raises(LayoutError):
        ComputePaddingLayout(3, torch.tensor([0, 3]), "test")
    with pytest.raises(LayoutError) as info:
        attach_layout(object(), [0, 1])
    assert str(info.value) == "attach_layout expects a ComputePaddingLayout, got list"


@pytest.mark.parametrize(
    "build,message",
    [
        (lambda: lane_slot_layout([4], 2, 0, num_rows=1), "lane-slot: num_rows=1 below the 2 lane-slot rows"),
        (lambda: lane_slot_layout([3, -1], 2, 0), "lane-slot: negative extend length in [3, -1]"),
        (lambda: lane_slot_layout([3], 2, 2), "lane-slot: bad cp_size=2 / cp_rank=2"),
        (lambda: ComputePaddingLayout(-1, None, "test"), "test: negative row count -1"),
        (
            lambda: ComputePaddingLayout(3, torch.tensor([0, 1], dtype=torch.int32), "test"),
            "test: valid_rows must be a 1-D CPU int64 tensor, got tensor([0, 1], dtype=torch.int32)",
        ),
        (
            lambda: ComputePaddingLayout(3, torch.tensor([[0, 1]]), "test"),
            "test: valid_rows must be a 1-D CPU int64 tensor, got tensor([[0, 1]])",
        ),
        (lambda: ComputePaddingLayout(4, torch.tensor([0, 1, 4]), "test"), "test: valid rows outside [0, 4)"),
        (
            lambda: ComputePaddingLayout(4, torch.tensor([0, 2, 1]), "test"),
            "test: valid rows must be strictly increasing",
        ),
    ],
    ids=[
        "rows-below-lane-slots",
        "negative-length",
        "bad-rank",
        "negative-rows",
        "int32",
        "2-d",
        "last-row-outside",
        "not-increasing",
    ],
)
def test_bad_input_is_refused_with_a_message_that_names_it(build, message):
    """Every check looks at the whole input (the last valid row, each neighbour pair, the dtype
    and the shape on their own) and says what it refused."""
    with pytest.raises(LayoutError) as info:
        build()
    assert str(info.value) == message


def test_device_tensors_are_prepared_once_per_device():
    layout = lane_slot_layout([5, 2, 3], 2, 1)
    index, count = layout.device_tensors(torch.device("cpu"))
    again = layout.device_tensors("cpu")
    assert again[0] is index and again[1] is count
    assert layout.materializations == 1
    assert index.dtype == torch.int64 and index.tolist() == [0, 1, 3, 4]
    assert count.dtype == torch.int32 and count.shape == () and int(count) == 4


# The bug, shown on upstream's own top-k mask (a suffix of num_token_non_padded rows: a valid lane-slot row
# dropped, a dummy one admitted), is the patch's probe: sglang_overlay/patches/moe_cp_compaction/probe.py,
# tested in tests/patches/moe_cp_compaction/test_probe.py and reported by `sglang-overlay check --needed`.


# ----------------------------------------------------------------- sources and edge cases of the producers


def test_each_producer_names_itself():
    from types import SimpleNamespace

    assert ComputePaddingLayout.identity(4).source == "identity"
    assert ComputePaddingLayout.identity(4, "mine").source == "mine"
    assert lane_slot_layout([5, 2, 3], 2, 1).source == "lane-slot"
    padded = cp_padding_layout(SimpleNamespace(per_rank_actual_token=[4], per_rank_logical_token=[3]), 0)
    whole = cp_padding_layout(SimpleNamespace(per_rank_actual_token=[4], per_rank_logical_token=[4]), 0)
    assert (padded.source, whole.source) == ("cp-padding", "cp-padding")
    assert repr(padded) == "ComputePaddingLayout(source='cp-padding', num_rows=4, num_valid=3)"


def test_cp_padding_without_logical_rows_is_the_identity_and_a_rank_may_hold_only_padding():
    from types import SimpleNamespace

    no_logical = cp_padding_layout(SimpleNamespace(per_rank_actual_token=[5, 5]), 1)
    assert (no_logical.num_rows, no_logical.has_dummy_rows) == (5, False)
    only_padding = cp_padding_layout(SimpleNamespace(per_rank_actual_token=[4, 4], per_rank_logical_token=[7, 0]), 1)
    assert (only_padding.num_rows, only_padding.num_valid, only_padding.row_indices().tolist()) == (4, 0, [])
    with pytest.raises(LayoutError, match="rank 0 has -1 logical rows for 4 physical rows"):
        cp_padding_layout(SimpleNamespace(per_rank_actual_token=[4], per_rank_logical_token=[-1]), 0)


def test_device_tensors_are_moved_to_a_non_cpu_device_once():
    """The accelerator branch on the CPU host: torch's "meta" device stands in for the
    accelerator (shapes and dtypes only; pinning and non_blocking are CUDA's: scripts/gpu_check.sh)."""
    layout = lane_slot_layout([5, 2, 3], 2, 1)
    index, count = layout.device_tensors("meta")
    assert (index.device.type, index.dtype, tuple(index.shape)) == ("meta", torch.int64, (4,))
    assert (count.device.type, count.dtype, tuple(count.shape)) == ("meta", torch.int32, ())
    assert layout.device_tensors(torch.device("meta")) == (index, count) and layout.materializations == 1
    cpu_index, _ = layout.device_tensors("cpu")
    assert cpu_index.device.type == "cpu" and layout.materializations == 2
