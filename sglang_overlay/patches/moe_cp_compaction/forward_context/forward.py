"""AROUND ``DeepseekV2MoE.forward_deepep`` (sglang >= 0.5.23): sparse MoE on the valid CP-local rows only.

Job: the shared boundary, and for the call on the compact rows the compact count stated where this design's
top-k reads its bound: ``forward_context(replace(get_forward_context(), moe_num_token_non_padded=...))``.
Invariant: only where a forward context is active and upstream's getter exists; upstream's ``None`` stays
``None``; the context is restored after the call, also when it raises.
Cost: on the compact path one frozen-dataclass ``replace`` and one context-manager entry; no tensor op.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

from sglang_overlay.patches.moe_cp_compaction.boundary import run_on_valid_rows

__all__ = ["compact_count_in_context", "forward_deepep"]


def _compact_bound(upstream_bound, count):
    """The forward context's MoE bound for the compact rows: ``count`` where upstream's answers a bound."""

    def bound():
        return None if upstream_bound() is None else count

    return bound


@contextmanager
def compact_count_in_context(count):
    """The active forward context with top-k's bound answering ``count`` (unchanged without a bound)."""
    from sglang.srt.model_executor.forward_context import forward_context, get_forward_context, has_forward_context

    if not has_forward_context():
        yield
        return
    ctx = get_forward_context()
    upstream_bound = ctx.moe_num_token_non_padded
    if upstream_bound is not None:
        ctx = dataclasses.replace(ctx, moe_num_token_non_padded=_compact_bound(upstream_bound, count))
    with forward_context(ctx):
        yield


def forward_deepep(original, self, hidden_states, forward_batch=None, input_ids_global=None):
    """AROUND ``DeepseekV2MoE.forward_deepep`` (>= 0.5.23)."""
    return run_on_valid_rows(
        original,
        self,
        hidden_states,
        forward_batch,
        input_ids_global=input_ids_global,
        count_scope=compact_count_in_context,
    )
