"""Compute-padding layout of a rank's CP-local rows, and how a forward batch carries it.

Patch ``moe-cp-compaction``. Under context parallelism (CP) each rank holds a
CP-local slice of the batch's token rows, padded so that every rank has the same
number of rows for the CP collectives. Upstream's MoE knows padding only as one
scalar, ``num_token_non_padded`` (rows at or after it are masked): a suffix. A
:class:`ComputePaddingLayout` says exactly which local rows are valid, so the
MoE boundary can run on those rows alone (see ``sglang_overlay.patches.moe_cp_compaction.boundary``).

It is built on the host from host-side lengths, once per forward, and turned
into a device index tensor once per forward and device (a ``non_blocking`` copy
from pinned memory, never a host sync), then reused by every MoE layer.

Two producers
-------------
1. :func:`lane_slot_layout`: CP shared-KV *compute padding*. Request ``i`` with
   extend length ``L_i`` puts its token ``t`` in lane ``t mod N`` (the way
   upstream's interleave strategy shards tokens), reserves ``ceil(L_i / N)``
   slots in every lane, and rank ``r``'s local rows are the concatenation over
   requests of its slots, valid ones first. Dummy rows therefore sit *inside*
   the batch, after each request's valid rows. N = 2, requests A (L=5), B (L=2),
   C (L=3); ``a3`` is token 3 of A, ``.`` a dummy slot::

                   request A     | B  | C
       lane/rank 0:  a0  a2  a4  | b0 | c0  c2      6 rows, all valid
       lane/rank 1:  a1  a3  .   | b1 | c1  .       6 rows, rows 2 and 5 dummy
       local row:    0   1   2   | 3  | 4   5

   Rank 1 holds 4 valid rows. Upstream's suffix mask with
   ``num_token_non_padded = 4`` keeps rows 0..3: it lets the dummy row 2 into
   gate and top-k and masks the valid row 4 (``c1``) out.
2. :func:`cp_padding_layout`: upstream's own CP padding
   (``sglang.srt.layers.cp.padding``): rank ``r``'s rows are padded at the end
   from ``per_rank_logical_token[r]`` to ``per_rank_actual_token[r]``; read from
   the forward batch's ``attn_cp_metadata``.

A layout without dummy rows (or a forward without CP) is the identity: the
boundary sees ``has_dummy_rows`` False and calls upstream unchanged.

How a forward batch carries it
------------------------------
A compute-padding producer attaches its layout with :func:`attach_layout`
(attribute ``moe_compute_padding_layout`` on the ``ForwardBatch``). Otherwise
:func:`layout_of` derives it lazily from ``attn_cp_metadata`` on the first MoE
layer of a forward and caches it on the same ``ForwardBatch``, keyed by the
metadata object and its per-rank lengths: by then every writer of the metadata
(``prepare_cp_forward``, the breakable-graph runner that widens
``per_rank_actual_token`` to the captured rows) has run, and a ``ForwardBatch``
reused with other lengths rebuilds it.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

LAYOUT_ATTR = "moe_compute_padding_layout"
_CACHE_ATTR = "_moe_cp_padding_layout_cache"


class LayoutError(ValueError):
    """A layout or its inputs are inconsistent (the layout is not built)."""


class ComputePaddingLayout:
    """This rank's local rows: how many, and the sorted indices of the valid ones.

    ``valid_rows`` is a CPU int64 tensor, strictly increasing, within
    ``[0, num_rows)``; ``None`` means every row is valid (the identity).
    """

    __slots__ = ("num_rows", "valid_rows", "num_valid", "source", "materializations", "_device_tensors")

    def __init__(self, num_rows: int, valid_rows: Optional[torch.Tensor], source: str):
        num_rows = int(num_rows)
        if num_rows < 0:
            raise LayoutError(f"{source}: negative row count {num_rows}")
        if valid_rows is not None:
            if valid_rows.dim() != 1 or valid_rows.dtype != torch.int64 or valid_rows.device.type != "cpu":
                raise LayoutError(f"{source}: valid_rows must be a 1-D CPU int64 tensor, got {valid_rows!r}")
            if valid_rows.numel():
                if int(valid_rows[0]) < 0 or int(valid_rows[-1]) >= num_rows:
                    raise LayoutError(f"{source}: valid rows outside [0, {num_rows})")
                if valid_rows.numel() > 1 and not bool((valid_rows[1:] > valid_rows[:-1]).all()):
                    raise LayoutError(f"{source}: valid rows must be strictly increasing")
            if valid_rows.numel() == num_rows:
                valid_rows = None  # every row valid: the identity
        self.num_rows = num_rows
        self.valid_rows = valid_rows
        self.num_valid = num_rows if valid_rows is None else int(valid_rows.numel())
        self.source = source
        self.materializations = 0  # device index preparations (tests count them)
        self._device_tensors: dict = {}

    @classmethod
    def identity(cls, num_rows: int, source: str = "identity") -> "ComputePaddingLayout":
        return cls(num_rows, None, source)

    @property
    def has_dummy_rows(self) -> bool:
        return self.valid_rows is not None

    def valid_mask(self) -> torch.Tensor:
        """Host bool mask over the local rows (tests, diagnostics)."""
        mask = torch.zeros(self.num_rows, dtype=torch.bool)
        mask[self.row_indices()] = True
        return mask

    def row_indices(self) -> torch.Tensor:
        """Host int64 indices of the valid rows (``arange`` for the identity)."""
        return torch.arange(self.num_rows) if self.valid_rows is None else self.valid_rows

    def device_tensors(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(index, count)`` on ``device``: the valid-row indices (int64) and their
        number as an int32 scalar (what ``num_token_non_padded`` holds upstream).

        Prepared once per layout and device, then cached: a ``non_blocking`` copy
        from pinned host memory on an accelerator, no host sync.
        """
        device = torch.device(device)
        cached = self._device_tensors.get(device)
        if cached is not None:
            return cached
        index = self.row_indices()
        count = torch.tensor(self.num_valid, dtype=torch.int32)
        if device.type != "cpu":
            if device.type == "cuda" and torch.cuda.is_available():
                index, count = index.pin_memory(), count.pin_memory()
            index = index.to(device, non_blocking=True)
            count = count.to(device, non_blocking=True)
        self.materializations += 1
        self._device_tensors[device] = (index, count)
        return index, count

    def __repr__(self) -> str:
        return (
            f"ComputePaddingLayout(source={self.source!r}, num_rows={self.num_rows}, "
            f"num_valid={self.num_valid})"
        )


# --------------------------------------------------------------------------- producers


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
    """Layout of CP shared-KV compute padding (see the module docstring).

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


# --------------------------------------------------------------------------- forward batch


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
    once and cached on the forward batch (see the module docstring).
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
