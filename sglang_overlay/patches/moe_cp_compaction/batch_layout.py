"""How a forward batch carries its layout: attached by a producer, or derived from the CP metadata.

Job: ``attach_layout`` (a producer's layout wins) and ``layout_of`` (else derived lazily from
``attn_cp_metadata`` at the first MoE layer, after every writer of the metadata ran, and cached on the batch).
Invariant: the cache is keyed by the metadata object and its per-rank lengths, so a reused batch rebuilds.
Cost: a few attribute reads and a comparison of two short lists per MoE layer.
"""

from __future__ import annotations

from typing import Optional

from sglang_overlay.patches.moe_cp_compaction.errors import LayoutError
from sglang_overlay.patches.moe_cp_compaction.layout import ComputePaddingLayout
from sglang_overlay.patches.moe_cp_compaction.producers import cp_padding_layout

LAYOUT_ATTR = "moe_compute_padding_layout"
_CACHE_ATTR = "_moe_cp_padding_layout_cache"

__all__ = ["LAYOUT_ATTR", "attach_layout", "layout_of"]


def attach_layout(forward_batch, layout: ComputePaddingLayout) -> None:
    """Attach a producer's layout to a forward batch (it wins over the CP metadata)."""
    if not isinstance(layout, ComputePaddingLayout):
        raise LayoutError(f"attach_layout expects a ComputePaddingLayout, got {type(layout).__name__}")
    setattr(forward_batch, LAYOUT_ATTR, layout)


def _cp_rank() -> int:
    from sglang.srt.runtime_context import get_parallel

    return get_parallel().attn_cp_rank


def layout_of(forward_batch) -> Optional[ComputePaddingLayout]:
    """The layout of this forward's CP-local rows, or None without CP.

    An attached layout wins; otherwise it is derived from ``attn_cp_metadata``
    once and cached on the forward batch, keyed by the metadata object and its lengths.
    """
    attached = getattr(forward_batch, LAYOUT_ATTR, None)
    if attached is not None:
        return attached
    metadata = getattr(forward_batch, "attn_cp_metadata", None)
    actual = getattr(metadata, "per_rank_actual_token", None)
    if actual is None:
        return None
    logical = getattr(metadata, "per_rank_logical_token", None)
    cached = getattr(forward_batch, _CACHE_ATTR, None)
    if cached is not None and cached[0] is metadata and cached[1] == actual and cached[2] == logical:
        return cached[3]
    layout = cp_padding_layout(metadata, _cp_rank())
    setattr(forward_batch, _CACHE_ATTR, (metadata, list(actual), None if logical is None else list(logical), layout))
    return layout
