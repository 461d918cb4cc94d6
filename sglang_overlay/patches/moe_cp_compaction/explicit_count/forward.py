"""AROUND ``DeepseekV2MoE.forward_deepep`` (sglang < 0.5.23): sparse MoE on the valid CP-local rows only.

Job: this design's top-k takes ``num_token_non_padded`` from the forward batch, which the shared boundary
already sets to the compact count, so the hook is the boundary itself. Invariant and cost: ``boundary.py``.
"""

from __future__ import annotations

from sglang_overlay.patches.moe_cp_compaction.boundary import run_on_valid_rows

__all__ = ["forward_deepep"]


def forward_deepep(original, self, hidden_states, forward_batch=None, input_ids_global=None):
    """AROUND ``DeepseekV2MoE.forward_deepep``."""
    return run_on_valid_rows(original, self, hidden_states, forward_batch, input_ids_global=input_ids_global)
