"""Probe: do CP dummy (padding) rows reach gate / top-k / DeepEP dispatch in upstream sglang 0.5.23's
``DeepseekV2MoE.forward_deepep``? (CPU, one process simulating each CP rank in turn.)

Question (patch ``moe-cp-compaction``): is compacting the valid rows at the MoE boundary still needed on the
0.5.23 pin, and for which CP layout (interleave, zigzag)?

Run from the repository root (15-30 s of imports, then about a second):

    HF_HUB_OFFLINE=1 /work/r13/venv/bin/python docs/rebase-0.5.23/probe_moe_cp.py > docs/rebase-0.5.23/probe_moe_cp.out

Real upstream 0.5.23 code on the path, per CP rank:
  * the strategy objects: ``layers/cp/base.py:init_cp_strategy`` -> ``InterleaveCPStrategy`` / ``ZigzagCPStrategy``;
  * a real ``ForwardBatch`` (EXTEND) with ``extend_seq_lens_cpu``; ``layers/cp/utils.py:is_cp_active`` and
    ``prepare_cp_forward`` (``strategy.build_metadata`` + ``layers/cp/padding.py:pad_logical_token_to_physical``);
  * the CP-local rows from ``strategy.shard_hidden_states`` (which ends in ``padding.pad_local_rows``);
  * ``num_token_non_padded`` as the eager runner makes it: ``ForwardBatch._init_num_token_non_padded`` and
    ``set_local_num_token_non_padded(sharded=False)`` (``model_runner.py:_prepare_eager_forward_batch`` clears
    ``sharded`` under MLA / DSA prefill CP; with attention TP 1 ``sharded=True`` gives the same count);
  * ``forward_context(get_forward_context(), forward_batch=batch)`` as ``EagerRunner._execute_extend`` enters it, so
    top-k's count is ``ForwardBatch.moe_num_token_non_padded`` -> ``strategy.moe_num_token_non_padded``;
  * ``DeepseekV2MoE`` built by its own ``__init__`` (real ``MoEGate``, grouped ``TopK`` with correction bias, real
    ``DeepseekV2MLP`` shared experts; ``build_moe`` of tests/support/moe_standins_0523.py, because
    tests/support/moe_standins.py's ``build_deepseek_moe`` calls 0.5.20 APIs) and upstream's own ``forward_deepep``
    (unhooked: ``__wrapped__`` if the overlay hooked it), whose top-k runs ``select_experts`` -> ``_post_process_topk_ids`` ->
    ``_mask_topk_ids_padded_region`` (the CPU branch: ``masked_fill_`` of rows >= count with -1).
Stand-ins (named as such, all because they need CUDA, deep_ep or several processes):
  * ``ExpertsStandIn`` / ``DeepEPDispatcherStandIn`` (tests/support/moe_standins.py): DeepEPMoE and its
    dispatcher; the dispatcher records what it receives (rows, top-k ids). ``_enable_a2a_moe = True``.
  * the MoE a2a backend flag set to DEEPEP for the forward (``is_moe_input_scattered_across_dp_ranks`` reads it;
    nothing on this path imports deep_ep).
  * ``GroupStandIn``: tp / attn_cp / moe_ep group handles of the CP world (``get_parallel().override`` validates
    the widths against the groups; no collective runs on this path). Ranks are set with the same override.
  * ``AttnBackendStandIn``: the forward context's mandatory attention backend (not read on this path).
"Dispatched" = rows with at least one top-k id >= 0 in what the dispatcher received: DeepEP sends a row only to
the experts its ids name, so a row whose ids are all -1 costs no all-to-all traffic (read in upstream's masking
comments, not run: deep_ep is not on this machine).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import importlib.metadata  # noqa: E402

import torch  # noqa: E402

from tests.support.moe_standins import MoeShape  # noqa: E402
from tests.support.moe_standins_0523 import (  # noqa: E402
    AttnBackendStandIn,
    build_moe,
    cp_rank_scope,
    prepare_cp_rank,
    upstream_forward_deepep,
)

CASES = [  # (cp_size, extend lengths): uneven so the ranks' shards differ and the padding is not empty
    (2, [5, 9, 7]),
    (4, [9, 13, 11]),
]
HIDDEN = MoeShape().hidden


def counts(moe, rec, upstream, x, batch, dummy, *, context=None):
    """Run upstream forward_deepep once under the eager runner's forward context; count rows per stage."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context, get_forward_context

    rec.gate.clear(), rec.shared.clear(), rec.topk.clear()
    moe.experts.dispatcher.received.clear()
    with forward_context(ForwardContext(attn_backend=AttnBackendStandIn())):
        with forward_context(get_forward_context(), forward_batch=batch):
            if context is not None:  # a port sketch: the boundary states the count in the forward context
                with forward_context(dataclasses.replace(get_forward_context(), moe_num_token_non_padded=context)):
                    bound = get_forward_context().moe_num_token_non_padded()
                    with torch.no_grad():
                        out = upstream(moe, x, batch)
            else:
                bound = get_forward_context().moe_num_token_non_padded()
                with torch.no_grad():
                    out = upstream(moe, x, batch)
    (gate,), (shared,), (topk,) = rec.gate, rec.shared, rec.topk
    (sent,) = moe.experts.dispatcher.received
    ids = sent["topk_ids"]
    routed = (ids >= 0).any(dim=1)  # rows DeepEP would send somewhere
    assert gate.shape[0] == shared.shape[0] == topk["hidden_states"].shape[0] == ids.shape[0] == x.shape[0]
    return dict(
        rows=x.shape[0], bound=None if bound is None else int(bound),
        gate=gate.shape[0], gate_dummy=int(dummy.sum()),
        shared=shared.shape[0],
        topk_valid_ids=int(routed.sum()), dispatched_dummy=int((routed & dummy).sum()),
        dummy_id_slots=int((ids[dummy] >= 0).sum()),
        dummy_experts=sorted(set(ids[dummy & routed].flatten().tolist()) - {-1}),
        out=out,
    )


def main():
    torch.manual_seed(0)
    print(f"sglang {importlib.metadata.version('sglang')}, torch {torch.__version__}, device cpu")
    moe, rec = build_moe()  # upstream __init__ on one-process gloo groups, DeepEP stand-ins
    upstream = upstream_forward_deepep()
    print(f"DeepseekV2MoE: hidden {HIDDEN}, {moe.config.n_routed_experts} experts, top-{moe.config.num_experts_per_tok}, "
          f"shared experts {moe.config.n_shared_experts}; forward_deepep = {upstream.__module__}.{upstream.__qualname__}")  # fmt: skip
    print()
    verdict = {}
    for cp_size, lens in CASES:
        x_full = torch.randn(sum(lens), HIDDEN)
        for strategy in ("interleave", "zigzag"):
            print(f"== {strategy}, cp_size {cp_size}, extend lengths {lens} (T = {sum(lens)})")
            print("rank | local rows | valid | top-k count (source) | gate rows (dummy) | shared-expert rows | "
                  "rows with ids>=0 (dummy) | dummy id slots | experts the dummy rows hit")  # fmt: skip
            for rank in range(cp_size):
                with cp_rank_scope(strategy, cp_size, rank) as strat:
                    batch, local_x, dummy = prepare_cp_rank(strat, lens, x_full)
                    md = batch.attn_cp_metadata
                    valid = md.per_rank_logical_token[rank]
                    assert int((~dummy).sum()) == valid and not dummy[:valid].any()  # suffix padding, as read
                    c = counts(moe, rec, upstream, local_x, batch, dummy)
                    source = ("strategy: per_rank_logical_token[rank]" if strategy == "interleave"
                              else "forward_batch.num_token_non_padded (global T)")  # fmt: skip
                    print(f"{rank:4} | {c['rows']:10} | {valid:5} | {str(c['bound']):>3} ({source}) | "
                          f"{c['gate']} ({c['gate_dummy']}) | {c['shared']} | {c['topk_valid_ids']} "
                          f"({c['dispatched_dummy']}) | {c['dummy_id_slots']} | {c['dummy_experts']}")  # fmt: skip
                    v = verdict.setdefault(strategy, dict(rows=0, valid=0, gate_dummy=0, dispatched_dummy=0))
                    v["rows"] += c["rows"]
                    v["valid"] += valid
                    v["gate_dummy"] += c["gate_dummy"]
                    v["dispatched_dummy"] += c["dispatched_dummy"]

                    # Does swapping forward_batch.num_token_non_padded (what the 0.5.20 boundary does) reach top-k?
                    # (a sentinel of 1, unlike any count here, shows whether the count follows the swap)
                    saved = batch.num_token_non_padded
                    batch.num_token_non_padded = torch.tensor(1, dtype=torch.int32)
                    try:
                        swapped = int(batch.moe_num_token_non_padded())
                    finally:
                        batch.num_token_non_padded = saved
                    # Port sketch: compact the valid rows, state the compact count in the forward context.
                    index = torch.nonzero(~dummy).flatten()
                    count = torch.tensor(index.numel(), dtype=torch.int32)
                    k = counts(moe, rec, upstream, local_x.index_select(0, index), batch, dummy[index],
                               context=lambda: count)  # fmt: skip
                    restored = k["out"].new_zeros(c["out"].shape).index_copy_(0, index, k["out"])
                    same = torch.allclose(restored[index], c["out"][index], rtol=1e-5, atol=1e-5)
                    print(f"       swap forward_batch.num_token_non_padded -> 1: top-k count becomes {swapped}"
                          f" ({'follows the swap' if swapped == 1 else 'ignores the swap'}); compacted + count in forward context:"
                          f" gate {k['gate']}, ids>=0 {k['topk_valid_ids']}, valid-row output equal to upstream's: {same}")  # fmt: skip
            print()
    print("== summary over all ranks and cases (rows that are CP padding)")
    for strategy, v in verdict.items():
        print(f"{strategy:10}: local rows {v['rows']}, valid {v['valid']}, dummy rows at gate + shared experts + top-k "
              f"{v['gate_dummy']}, dummy rows dispatched (ids >= 0) {v['dispatched_dummy']}")  # fmt: skip


if __name__ == "__main__":
    main()
