"""``layout_of`` and ``cp_padding_layout`` on upstream's own CP metadata of sglang < 0.5.23 (its strategies,
``pad_logical_token_to_physical``, ``attn_cp_size`` / ``attn_cp_rank`` overrides)."""

import pytest

from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout, layout_of
from sglang_overlay.patches.moe_cp_compaction.errors import LayoutError
from sglang_overlay.patches.moe_cp_compaction.producers import cp_padding_layout, lane_slot_layout

# ----------------------------------------------------------------- upstream's CP padding


@pytest.fixture(scope="module")
def cp():
    from tests.support.runtime import publish_cpu_runtime

    publish_cpu_runtime()
    from sglang.srt.layers.cp.interleave import InterleaveCPStrategy
    from sglang.srt.layers.cp.padding import pad_logical_token_to_physical
    from sglang.srt.layers.cp.zigzag import ZigzagCPStrategy
    from sglang.srt.runtime_context import get_parallel

    return dict(
        strategies=(InterleaveCPStrategy, ZigzagCPStrategy),
        pad=pad_logical_token_to_physical,
        parallel=get_parallel,
    )


@pytest.mark.parametrize("lens", [[7, 9, 2], [16], [40, 8, 8, 1]])
@pytest.mark.parametrize("n", [2, 4])
def test_cp_padding_layout_from_upstream_metadata(cp, lens, n):
    """Upstream pads each rank's rows at the end: the layout keeps the logical rows."""
    from types import SimpleNamespace

    for strategy_cls in cp["strategies"]:
        with cp["parallel"]().override(attn_cp_size=n, attn_cp_rank=0):
            metadata = strategy_cls(cp_size=n).build_metadata(sum(lens), lens, lens)
            cp["pad"](metadata)
        for r in range(n):
            layout = cp_padding_layout(metadata, r)
            assert layout.num_rows == metadata.per_rank_actual_token[r]
            assert layout.row_indices().tolist() == list(range(metadata.per_rank_logical_token[r]))
            batch = SimpleNamespace(attn_cp_metadata=metadata)
            with cp["parallel"]().override(attn_cp_rank=r):
                first = layout_of(batch)
                assert layout_of(batch) is first  # cached for every later MoE layer
            assert first.row_indices().tolist() == layout.row_indices().tolist()


def test_layout_of_follows_the_metadata_and_prefers_an_attached_layout(cp):
    from types import SimpleNamespace

    metadata = SimpleNamespace(per_rank_actual_token=[4, 4], per_rank_logical_token=[3, 2])
    batch = SimpleNamespace(attn_cp_metadata=metadata)
    with cp["parallel"]().override(attn_cp_rank=1):
        assert layout_of(batch).row_indices().tolist() == [0, 1]
        # a breakable-graph replay widens the physical rows on the same metadata
        metadata.per_rank_actual_token = [6, 6]
        widened = layout_of(batch)
        assert (widened.num_rows, widened.num_valid) == (6, 2)
        attached = lane_slot_layout([3, 3], 2, 1)
        attach_layout(batch, attached)
        assert layout_of(batch) is attached
    assert layout_of(SimpleNamespace(attn_cp_metadata=None)) is None
    same = SimpleNamespace(per_rank_actual_token=[4, 4], per_rank_logical_token=[4, 4])
    assert not cp_padding_layout(same, 0).has_dummy_rows
    with pytest.raises(LayoutError):
        cp_padding_layout(SimpleNamespace(per_rank_actual_token=[2], per_rank_logical_token=[3]), 0)


def test_layout_of_rebuilds_when_only_the_logical_rows_change(cp):
    """The cache key holds the logical rows too (a copy): a ForwardBatch reused with the same
    physical rows but other logical rows, even refilled in place, gets a new layout."""
    from types import SimpleNamespace

    metadata = SimpleNamespace(per_rank_actual_token=[4, 4], per_rank_logical_token=[3, 2])
    batch = SimpleNamespace(attn_cp_metadata=metadata)
    with cp["parallel"]().override(attn_cp_rank=1):
        first = layout_of(batch)
        assert first.row_indices().tolist() == [0, 1]
        metadata.per_rank_logical_token[1] = 3  # the same list object, refilled
        refilled = layout_of(batch)
        assert refilled is not first and refilled.row_indices().tolist() == [0, 1, 2]
        metadata.per_rank_logical_token = [3, 4]  # every physical row logical now
        assert not layout_of(batch).has_dummy_rows


def test_layout_of_metadata_without_logical_rows_and_a_batch_without_cp_metadata(cp):
    """Metadata without ``per_rank_logical_token`` is the identity (as in cp_padding_layout), and
    an object without ``attn_cp_metadata`` (or no forward batch at all: op_gate's state may hold
    none) has no layout, never an AttributeError."""
    from types import SimpleNamespace

    batch = SimpleNamespace(attn_cp_metadata=SimpleNamespace(per_rank_actual_token=[5, 5]))
    with cp["parallel"]().override(attn_cp_rank=1):
        layout = layout_of(batch)
        assert (layout.num_rows, layout.has_dummy_rows, layout.source) == (5, False, "cp-padding")
        assert layout_of(batch) is layout
    assert layout_of(SimpleNamespace()) is None
    assert layout_of(None) is None
