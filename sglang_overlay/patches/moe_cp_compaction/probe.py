"""Still needed? Upstream's MoE boundary on the rows CP shared-KV compute padding really produces.

``probe()`` builds the lane-slot layout of CP shared-KV compute padding (``producers.lane_slot_layout``: rank 1
of extend lengths ``[5, 2, 3]`` under CP 2, whose valid rows are not a prefix) and asks upstream the two
halves of the description's "When it can be dropped":

- **The mask.** Upstream's own ``sglang.srt.layers.moe.topk._mask_topk_ids_padded_region`` with that rank's
  valid count, the only validity upstream's sparse MoE takes (``num_token_non_padded``): needed while the rows
  it keeps are not exactly the valid rows (a valid row loses its experts, a dummy row reaches DeepEP dispatch).
- **The boundary.** Upstream's own ``DeepseekV2MoE.forward_deepep``, run unbound on a recording stand-in for
  the module (``_Recorder``: a gate, shared experts and a top-k that count the rows they are handed; the
  top-k ends the call, so nothing past it runs): needed while gate and top-k are handed the dummy rows.

This is the single record of upstream's behaviour: the boundary tests assert the patched path only, and the
probe's test (each pin's tier) asserts this evidence. A mask that takes more than a count, or a
``forward_deepep`` that needs more of its module than the stand-in has, is "cannot tell here" (re-read "When
it can be dropped"), never "fixed upstream" by guess; a half that still shows the bug makes the patch needed.

Invariant: upstream's functions are called as its CPU path calls them (ids in a column-major view, so
releases with a fused branch take their eager one). Cost: importing upstream's top-k and DeepSeek-V2 modules
(seconds), one tiny mask, one gate call on 5 rows.
"""

from __future__ import annotations

import inspect

from sglang_overlay.core.registry import CANNOT_TELL, FIXED_UPSTREAM, NEEDED, Finding

LENS, CP_SIZE, CP_RANK = [5, 2, 3], 2, 1
_COUNT_ONLY = ("topk_ids", "num_token_non_padded", "fill_value")


def probe() -> Finding:
    from sglang_overlay.patches.moe_cp_compaction.producers import lane_slot_layout

    layout = lane_slot_layout(LENS, CP_SIZE, CP_RANK)
    valid = sorted(layout.row_indices().tolist())
    case = f"rank {CP_RANK} of extend lens {LENS}, CP {CP_SIZE}; valid rows {valid} of {layout.num_rows}"
    halves = (_mask_half(layout, set(valid)), _boundary_half(layout))
    for verdict in (NEEDED, CANNOT_TELL):
        said = [evidence for got, evidence in halves if got == verdict]
        if said:
            return Finding(verdict, f"on CP shared-KV lane-slot rows ({case}): " + "; ".join(said))
    return Finding(FIXED_UPSTREAM, f"on CP shared-KV lane-slot rows ({case}): " + "; ".join(e for _, e in halves))


def _mask_half(layout, valid: set[int]) -> tuple[str, str]:
    import torch
    from sglang.srt.layers.moe import topk

    mask = getattr(topk._mask_topk_ids_padded_region, "__wrapped__", topk._mask_topk_ids_padded_region)
    params = tuple(inspect.signature(mask).parameters)
    if params != _COUNT_ONLY:
        return CANNOT_TELL, f"upstream's top-k padding mask takes {params} now, not only a count: re-read it"
    ids = torch.arange(layout.num_rows, dtype=torch.int32).repeat(4, 1).t()  # row r routes to expert r
    mask(ids, torch.tensor(layout.num_valid, dtype=torch.int32))
    kept = set(torch.nonzero(ids[:, 0] != -1).flatten().tolist())
    if kept == valid:
        return FIXED_UPSTREAM, f"upstream's top-k mask keeps exactly the valid rows {sorted(valid)}"
    return NEEDED, (f"upstream's top-k padding mask keeps a prefix of num_token_non_padded={layout.num_valid} "
                    f"rows: it drops valid rows {sorted(valid - kept)} and lets dummy rows {sorted(kept - valid)} "
                    "reach top-k")  # fmt: skip


class _TopkReached(Exception):
    """Raised by the stand-in's top-k: the boundary has been seen, nothing past it runs."""


class _Recorder:
    """A CPU stand-in for a ``DeepseekV2MoE`` instance (no SBO, no fused shared experts, no alternate stream;
    ``is_nextn`` as upstream's MTP layer, so no expert-location lookup, which needs a server's config):
    upstream's ``forward_deepep`` runs on it unbound; it records how many rows gate, the shared experts and
    top-k are handed."""

    _fuse_shared_experts_inside_sbo = False
    is_nextn = True
    num_fused_shared_experts = layer_id = 0
    alt_stream = None

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}

    def gate(self, hidden_states, *args, **kwargs):
        import torch

        self.rows["gate"] = hidden_states.shape[0]
        return torch.zeros(hidden_states.shape[0], 4)

    def _forward_shared_experts(self, hidden_states):
        self.rows["shared experts"] = hidden_states.shape[0]
        return hidden_states

    def topk(self, hidden_states, router_logits, **kwargs):
        self.rows["top-k"] = hidden_states.shape[0]
        raise _TopkReached


def _boundary_half(layout) -> tuple[str, str]:
    import torch
    from sglang.srt.models.deepseek_v2 import DeepseekV2MoE

    forward = getattr(DeepseekV2MoE.forward_deepep, "__wrapped__", DeepseekV2MoE.forward_deepep)
    batch = type("ForwardBatchCount", (), {"num_token_non_padded": torch.tensor(layout.num_valid)})()
    module = _Recorder()
    try:
        forward(module, torch.zeros(layout.num_rows, 8), batch)
    except _TopkReached:
        pass
    except Exception as exc:  # noqa: BLE001 - any other shape of upstream's boundary is re-read, not guessed
        return CANNOT_TELL, f"upstream's forward_deepep needs more than gate/top-k now ({type(exc).__name__}: {exc})"
    seen = {stage: n for stage, n in module.rows.items() if stage != "shared experts" or n}
    if seen.get("gate") is None or seen.get("top-k") is None:
        return CANNOT_TELL, f"upstream's forward_deepep no longer calls gate and top-k in turn (saw {seen})"
    if max(seen.values()) == layout.num_valid:
        return FIXED_UPSTREAM, f"upstream's forward_deepep hands gate and top-k only the {layout.num_valid} valid rows"
    handed = ", ".join(f"{stage} {n}" for stage, n in seen.items())
    return NEEDED, (f"upstream's forward_deepep hands every row to gate and top-k ({handed} of {layout.num_rows} "
                    f"rows, {layout.num_rows - layout.num_valid} of them dummy)")  # fmt: skip
