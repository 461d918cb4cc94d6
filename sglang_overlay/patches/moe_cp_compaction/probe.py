"""Still needed? Upstream's top-k padding mask, on the rows CP shared-KV compute padding really produces.

``probe()`` builds the lane-slot layout of CP shared-KV compute padding (``producers.lane_slot_layout``: rank 1
of extend lengths ``[5, 2, 3]`` under CP 2, whose valid rows are not a prefix) and runs upstream's own
``sglang.srt.layers.moe.topk._mask_topk_ids_padded_region`` with that rank's valid count, the only validity
upstream's sparse MoE takes (``num_token_non_padded``). Upstream keeps the rows its mask leaves; the patch is
needed while those are not exactly the valid rows (a valid row loses its experts, a dummy row reaches top-k
and DeepEP dispatch). A mask that takes more than a count (a per-row index or mask: the description's "When it
can be dropped") is "cannot tell here", to re-read, never "fixed upstream" by guess.

Invariant: upstream's function is called as its CPU path calls it (ids in a column-major view, so releases
with a fused branch take their eager one). Cost: importing upstream's top-k module (seconds), one tiny mask.
"""

from __future__ import annotations

import inspect

from sglang_overlay.core.registry import CANNOT_TELL, FIXED_UPSTREAM, NEEDED, Finding

LENS, CP_SIZE, CP_RANK = [5, 2, 3], 2, 1
_COUNT_ONLY = ("topk_ids", "num_token_non_padded", "fill_value")


def probe() -> Finding:
    import torch
    from sglang.srt.layers.moe import topk

    from sglang_overlay.patches.moe_cp_compaction.producers import lane_slot_layout

    mask = getattr(topk._mask_topk_ids_padded_region, "__wrapped__", topk._mask_topk_ids_padded_region)
    params = tuple(inspect.signature(mask).parameters)
    if params != _COUNT_ONLY:
        return Finding(CANNOT_TELL, f"upstream's top-k padding mask takes {params} now, not only a count: re-read "
                       "'When it can be dropped'")  # fmt: skip
    layout = lane_slot_layout(LENS, CP_SIZE, CP_RANK)
    ids = torch.arange(layout.num_rows, dtype=torch.int32).repeat(4, 1).t()  # row r routes to expert r
    mask(ids, torch.tensor(layout.num_valid, dtype=torch.int32))
    kept = set(torch.nonzero(ids[:, 0] != -1).flatten().tolist())
    valid = set(layout.row_indices().tolist())
    if kept == valid:
        return Finding(FIXED_UPSTREAM, f"upstream's top-k mask keeps exactly the valid rows {sorted(valid)}")
    return Finding(NEEDED, f"upstream's top-k padding mask keeps a prefix of num_token_non_padded={layout.num_valid} "
                   f"rows: on CP shared-KV lane-slot rows (rank {CP_RANK} of extend lens {LENS}, CP {CP_SIZE}; valid "
                   f"rows {sorted(valid)}) it drops valid rows {sorted(valid - kept)} and lets dummy rows "
                   f"{sorted(kept - valid)} reach top-k")  # fmt: skip
