"""Shared pieces of the forward_context/ boundary tests (sglang >= 0.5.23): the CP cases (cp2 and cp4, every
rank, uneven lengths), the hooked ``forward_deepep`` as SGLang's HookRegistry installs the AROUND hook
(``hook(original, self, ...)`` with upstream's own ``forward_deepep`` as ``original``), and one call of a path
(``"patched"``, ``"upstream"``, ``"batch-count-only"``) with what each stage saw.

Invariant: no test here; a call clears the records of the conftest's ``moe`` first and leaves the forward context
as it found it. Cost: one layer forward per ``run_path`` call, nothing at import.
"""

from __future__ import annotations

import pytest
import torch

from sglang_overlay.patches.moe_cp_compaction.boundary import run_on_valid_rows
from sglang_overlay.patches.moe_cp_compaction.forward_context import forward
from tests.patches.moe_cp_compaction.forward_context.standins import cp_rank_scope, eager_forward_context
from tests.support.moe_standins import MoeShape

HIDDEN = MoeShape().hidden
CASES = [(2, [5, 9, 7]), (4, [9, 13, 11])]  # uneven: every rank's shard is padded, by different amounts
RANKS = [pytest.param(cp, lens, r, id=f"cp{cp}-rank{r}") for cp, lens in CASES for r in range(cp)]
TOL = dict(rtol=1e-5, atol=1e-5)


def _reset(moe):
    """Empty what the recorder, the top-k bound record and the stand-in dispatcher saw."""
    rec = moe["rec"]
    rec.gate.clear(), rec.shared.clear(), rec.topk.clear()
    moe["bounds"].clear()
    moe["layer"].experts.dispatcher.received.clear()


def hooked(moe, hook=None):
    """``DeepseekV2MoE.forward_deepep`` as the HookRegistry installs the AROUND hook (default: this release's)."""
    hook = hook or forward.forward_deepep

    def forward_deepep(self, hidden_states, forward_batch=None, input_ids_global=None):
        return hook(moe["upstream"], self, hidden_states, forward_batch, input_ids_global)

    return forward_deepep


def run_path(moe, path, local, batch, *, context=True):
    """One forward_deepep call of ``path`` under the eager runner's forward context; what each stage saw."""
    from contextlib import nullcontext

    from sglang.srt.model_executor.forward_context import get_forward_context, has_forward_context

    _reset(moe)
    paths = {"patched": hooked(moe), "upstream": moe["upstream"], "batch-count-only": hooked(moe, run_on_valid_rows)}
    fn = paths[path]
    with eager_forward_context(batch) if context else nullcontext(), torch.no_grad():
        before = get_forward_context() if has_forward_context() else None
        out = fn(moe["layer"], local, batch)
        after = get_forward_context() if has_forward_context() else None
    rec, received = moe["rec"], moe["layer"].experts.dispatcher.received
    return dict(
        out=out, context_restored=before is after,
        gate=[g.shape[0] for g in rec.gate], shared=[s.shape[0] for s in rec.shared],
        topk=[t["hidden_states"].shape[0] for t in rec.topk], bounds=list(moe["bounds"]),
        routed=[int((d["topk_ids"] >= 0).any(dim=1).sum()) for d in received],
        dispatched=[d["hidden_states"] for d in received],
    )  # fmt: skip


def cp_case(strategy, cp, lens, rank):
    """``(the scope of CP rank ``rank``, the batch's hidden states)``, seeded by the case."""
    x = torch.randn(sum(lens), HIDDEN, generator=torch.Generator().manual_seed(sum(lens) + cp))
    return cp_rank_scope(strategy, cp, rank), x
