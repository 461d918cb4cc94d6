"""Row compaction and restore at the MoE boundary, and the row-count check before either.

Job: gather the valid rows, scatter a result back into zeros of the padded shape, refuse a tensor whose
rows are not the layout's CP-local rows. Invariant: restore keeps dtype and device, dummy rows zero.
Cost: one ``index_select``; one ``new_zeros`` and one ``index_copy_``; no host sync.
"""

from __future__ import annotations

import torch

from sglang_overlay.patches.moe_cp_compaction.errors import PATCH_ID, MoeCompactionError
from sglang_overlay.patches.moe_cp_compaction.layout import ComputePaddingLayout

__all__ = ["check_rows", "compact_rows", "restore_rows"]


def compact_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Gather the valid rows (``index`` from ``ComputePaddingLayout.device_tensors``)."""
    return x.index_select(0, index)


def restore_rows(y: torch.Tensor, index: torch.Tensor, num_rows: int) -> torch.Tensor:
    """Scatter compact rows back into a zero-filled tensor of ``num_rows`` rows."""
    full = y.new_zeros((num_rows, *y.shape[1:]))
    return full.index_copy_(0, index, y)


def check_rows(what: str, rows: int, layout: ComputePaddingLayout) -> None:
    """Raise unless ``rows`` is the layout's CP-local row count (the MoE input is this rank's rows)."""
    if rows != layout.num_rows:
        raise MoeCompactionError(
            f"{PATCH_ID}: {what} has {rows} rows but the forward's {layout.source} layout has "
            f"{layout.num_rows} CP-local rows ({layout.num_valid} valid). The MoE input is not "
            "this rank's CP-local rows (e.g. a moe-cp all-gather before MoE), which this patch "
            f"does not support; disable it with SGLANG_OVERLAY_DISABLE={PATCH_ID} or change the "
            "parallel layout."
        )
