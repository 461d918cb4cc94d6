"""Host-side layout of a rank's CP-local rows: how many, and which are valid.

Job: :class:`ComputePaddingLayout` says exactly which local rows are valid (upstream knows padding only
as a suffix, ``num_token_non_padded``), and prepares their device index once per device.
Invariant: ``valid_rows`` is a strictly increasing CPU int64 tensor in ``[0, num_rows)``, or None (identity).
Cost: built on the host once per forward; one ``non_blocking`` copy from pinned memory per device, no host
sync. Producers: ``producers.py``; how a forward batch carries it: ``batch_layout.py``.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang_overlay.patches.moe_cp_compaction.errors import LayoutError

__all__ = ["ComputePaddingLayout", "LayoutError"]


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
        return f"ComputePaddingLayout(source={self.source!r}, num_rows={self.num_rows}, num_valid={self.num_valid})"
