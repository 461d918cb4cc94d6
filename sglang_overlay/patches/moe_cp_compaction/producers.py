"""The two producers of a :class:`ComputePaddingLayout`.

Job: ``lane_slot_layout`` (CP shared-KV compute padding: token ``t`` of a request in lane ``t mod N``,
``ceil(L / N)`` slots per lane, dummy rows inside the batch) and ``cp_padding_layout`` (upstream's CP
padding, a suffix from ``per_rank_logical_token`` to ``per_rank_actual_token``).
Invariant: every batch token lands in exactly one rank's valid row. Cost: vectorized CPU ops, once per forward.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from sglang_overlay.patches.moe_cp_compaction.errors import LayoutError
from sglang_overlay.patches.moe_cp_compaction.layout import ComputePaddingLayout

__all__ = ["cp_padding_layout", "lane_slot_layout", "lane_slot_tokens"]


def _lengths(extend_lens: Sequence[int], what: str) -> torch.Tensor:
    lens = torch.as_tensor([int(x) for x in extend_lens], dtype=torch.int64)
    if lens.numel() and int(lens.min()) < 0:
        raise LayoutError(f"{what}: negative extend length in {list(extend_lens)}")
    return lens


def lane_slot_tokens(extend_lens: Sequence[int], cp_size: int, cp_rank: int) -> torch.Tensor:
    """For each of rank ``cp_rank``'s lane-slot rows, the batch token it holds
    (index into the concatenated extend tokens), or -1 for a dummy slot."""
    if cp_size < 1 or not 0 <= cp_rank < cp_size:
        raise LayoutError(f"lane-slot: bad cp_size={cp_size} / cp_rank={cp_rank}")
    lens = _lengths(extend_lens, "lane-slot")
    slots = (lens + cp_size - 1) // cp_size  # ceil(L_i / N) slots per lane
    total = int(slots.sum())
    request = torch.repeat_interleave(torch.arange(lens.numel()), slots)
    slot_start = torch.cumsum(slots, 0) - slots
    k = torch.arange(total) - slot_start[request]  # slot number within the request
    t = k * cp_size + cp_rank  # token of the request in this slot
    token_start = torch.cumsum(lens, 0) - lens
    tokens = token_start[request] + t
    return torch.where(t < lens[request], tokens, torch.full_like(tokens, -1))


def lane_slot_layout(
    extend_lens: Sequence[int], cp_size: int, cp_rank: int, num_rows: Optional[int] = None
) -> ComputePaddingLayout:
    """Layout of CP shared-KV compute padding (diagram: ``patches/moe-cp-compaction.md``).

    ``num_rows`` (optional) pads the rank's rows further at the end, e.g. to an
    alignment the collectives need; it must not be below the lane-slot rows.
    """
    tokens = lane_slot_tokens(extend_lens, cp_size, cp_rank)
    rows = tokens.numel() if num_rows is None else int(num_rows)
    if rows < tokens.numel():
        raise LayoutError(f"lane-slot: num_rows={rows} below the {tokens.numel()} lane-slot rows")
    return ComputePaddingLayout(rows, torch.nonzero(tokens >= 0).flatten(), "lane-slot")


def cp_padding_layout(metadata, cp_rank: int) -> ComputePaddingLayout:
    """Layout of upstream's CP padding: valid rows first, padded at the end from
    ``per_rank_logical_token[r]`` to ``per_rank_actual_token[r]``."""
    actual = metadata.per_rank_actual_token
    logical = getattr(metadata, "per_rank_logical_token", None)
    rows = int(actual[cp_rank])
    valid = rows if logical is None else int(logical[cp_rank])
    if not 0 <= valid <= rows:
        raise LayoutError(
            f"cp-padding: rank {cp_rank} has {valid} logical rows for {rows} physical rows "
            f"(per_rank_logical_token={logical}, per_rank_actual_token={actual})"
        )
    if valid == rows:
        return ComputePaddingLayout.identity(rows, "cp-padding")
    return ComputePaddingLayout(rows, torch.arange(valid), "cp-padding")
