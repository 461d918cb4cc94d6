"""``layout_of`` on every release: an attached layout wins, else the layout is derived from the batch's CP
metadata and cached on the batch, keyed by the metadata object and copies of its per-rank lengths.

Namespaces stand in for the batch and its metadata (only the two per-rank length lists are read); the CP rank
is set at the module's one read of upstream's runtime context (``_cp_rank``). Upstream's real metadata reaches it
in the release folder's tests (forward_context/: the boundary on upstream's real CP path)."""

from contextlib import contextmanager
from types import SimpleNamespace

import pytest

import sglang_overlay.patches.moe_cp_compaction.batch_layout as batch_layout
from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout, layout_of
from sglang_overlay.patches.moe_cp_compaction.errors import LayoutError
from sglang_overlay.patches.moe_cp_compaction.producers import cp_padding_layout, lane_slot_layout


@pytest.fixture
def cp_rank(monkeypatch):
    """Run as CP rank ``r``: the rank ``layout_of`` reads (``batch_layout._cp_rank``, upstream's
    ``get_parallel().attn_cp_rank``, which the release folders' tests set through upstream's own override)."""

    @contextmanager
    def as_rank(r):
        with monkeypatch.context() as m:
            m.setattr(batch_layout, "_cp_rank", lambda: r)
            yield

    return as_rank


@pytest.fixture
def builds(monkeypatch):
    """How many layouts ``layout_of`` derived (calls of ``cp_padding_layout``)."""
    calls = []

    def counted(metadata, rank):
        calls.append(rank)
        return cp_padding_layout(metadata, rank)

    monkeypatch.setattr(batch_layout, "cp_padding_layout", counted)
    return calls


def test_the_layout_is_derived_once_per_metadata_and_lengths(cp_rank, builds):
    """Every later MoE layer of the forward gets the same object; another metadata object (a reused batch
    given new metadata with the same lengths) or other physical rows derive a new one."""
    metadata = SimpleNamespace(per_rank_actual_token=[4, 4], per_rank_logical_token=[3, 2])
    batch = SimpleNamespace(attn_cp_metadata=metadata)
    with cp_rank(1):
        first = layout_of(batch)
        assert all(layout_of(batch) is first for _ in range(3)) and builds == [1]
        batch.attn_cp_metadata = SimpleNamespace(per_rank_actual_token=[4, 4], per_rank_logical_token=[3, 2])
        second = layout_of(batch)
        assert second is not first and layout_of(batch) is second and builds == [1, 1]
        batch.attn_cp_metadata.per_rank_actual_token[1] = 5  # refilled in place: the key holds a copy
        assert layout_of(batch).num_rows == 5 and builds == [1, 1, 1]


def test_layout_of_follows_the_metadata_and_prefers_an_attached_layout(cp_rank):
    metadata = SimpleNamespace(per_rank_actual_token=[4, 4], per_rank_logical_token=[3, 2])
    batch = SimpleNamespace(attn_cp_metadata=metadata)
    with cp_rank(1):
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


def test_layout_of_rebuilds_when_only_the_logical_rows_change(cp_rank):
    """The cache key holds the logical rows too (a copy): a ForwardBatch reused with the same
    physical rows but other logical rows, even refilled in place, gets a new layout."""
    metadata = SimpleNamespace(per_rank_actual_token=[4, 4], per_rank_logical_token=[3, 2])
    batch = SimpleNamespace(attn_cp_metadata=metadata)
    with cp_rank(1):
        first = layout_of(batch)
        assert first.row_indices().tolist() == [0, 1]
        metadata.per_rank_logical_token[1] = 3  # the same list object, refilled
        refilled = layout_of(batch)
        assert refilled is not first and refilled.row_indices().tolist() == [0, 1, 2]
        metadata.per_rank_logical_token = [3, 4]  # every physical row logical now
        assert not layout_of(batch).has_dummy_rows


def test_layout_of_metadata_without_logical_rows_and_a_batch_without_cp_metadata(cp_rank):
    """Metadata without ``per_rank_logical_token`` is the identity (as in cp_padding_layout), and
    an object without ``attn_cp_metadata`` (or no forward batch at all: op_gate's state may hold
    none) has no layout, never an AttributeError."""
    batch = SimpleNamespace(attn_cp_metadata=SimpleNamespace(per_rank_actual_token=[5, 5]))
    with cp_rank(1):
        layout = layout_of(batch)
        assert (layout.num_rows, layout.has_dummy_rows, layout.source) == (5, False, "cp-padding")
        assert layout_of(batch) is layout
    assert layout_of(SimpleNamespace()) is None
    assert layout_of(None) is None
