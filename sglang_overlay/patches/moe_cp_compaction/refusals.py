"""Start-up refusals shared by both releases: the messages they share and the prefill-CP gate.

Job: :func:`refuse_under_cp` raises, under prefill CP over several ranks, naming every problem a release's
``problems_of(moe)`` finds. Invariant: without prefill CP nothing is checked or refused.
Cost: one ``get_parallel()`` read per MoE layer at model construction.
"""

from __future__ import annotations

from sglang_overlay.errors import OverlayError
from sglang_overlay.patches.moe_cp_compaction.errors import PATCH_ID

__all__ = ["MEGA_MOE", "TENSOR_PARALLEL_MOE", "TWO_BATCH_OVERLAP", "refuse_under_cp"]

# Why each refused MoE configuration defeats the boundary, and what to change (start-up messages).
TWO_BATCH_OVERLAP = (
    "two-batch overlap runs MoE through op_gate ... op_output, which this patch does not "
    "compact (disable --enable-two-batch-overlap)"
)
MEGA_MOE = "the mega-MoE backend runs forward_mega_moe, which this patch does not compact"
TENSOR_PARALLEL_MOE = (
    "without an all-to-all MoE backend (--moe-a2a-backend none) the MoE runs forward_normal "
    "(tensor-parallel experts on rows gathered across CP ranks), which this patch does not "
    "compact (select an all-to-all backend such as --moe-a2a-backend deepep)"
)


def refuse_under_cp(moe, problems_of) -> None:
    """Under prefill CP, raise naming every problem ``problems_of(moe)`` finds (each release has its own)."""
    from sglang.srt.runtime_context import get_parallel

    parallel = get_parallel()
    if not (parallel.enable_prefill_cp and parallel.attn_cp_size > 1):
        return None
    problems = problems_of(moe)
    if problems:
        raise OverlayError(
            f"patch '{PATCH_ID}' cannot keep CP dummy rows out of sparse MoE in layer "
            f"{moe.layer_id}: "
            + "; ".join(problems)
            + f". Change the configuration or disable the patch (SGLANG_OVERLAY_DISABLE={PATCH_ID})."
        )
    return None
