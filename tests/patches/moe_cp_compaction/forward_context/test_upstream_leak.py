"""Upstream sglang 0.5.23 lets CP dummy (padding) rows into DeepseekV2MoE.forward_deepep: the evidence that
patch moe-cp-compaction is still needed on that pin. Collected only where sglang >= 0.5.23 (folder forward_context/).

On upstream's real CP path (``init_cp_strategy``'s strategy objects, a real ``ForwardBatch``, ``prepare_cp_forward``
with ``pad_logical_token_to_physical``, ``strategy.shard_hidden_states`` with ``pad_local_rows``, the eager runner's
``num_token_non_padded`` and ``forward_context(..., forward_batch=...)``) and upstream's own ``forward_deepep``
(unhooked) of a ``DeepseekV2MoE`` built by its own ``__init__``, with stand-ins only for DeepEP (experts and a
recording dispatcher; tests/patches/moe_cp_compaction/forward_context/standins.py) and for the CP world's group handles:

* zigzag: top-k's count is ``forward_batch.num_token_non_padded`` (``layers/cp/base.py``, not CP-localized: the
  batch's global token count), so every dummy row gets real expert ids and is dispatched;
* interleave: the strategy's CP-local count masks the dummy rows' ids to -1 (not dispatched), but gate, shared
  experts and top-k still run on them, and the count ignores a swapped ``forward_batch.num_token_non_padded``
  (the lever of the boundary before 0.5.23), so a port must state the compact count through the forward context.

Each assertion names the upstream behaviour it pins; one failing means upstream changed it (see
patches/moe-cp-compaction.md, "When it can be dropped"); the one-line verdict of every pin is the patch's probe
(``sglang-overlay check --needed``).
"""

from __future__ import annotations

import pytest
import torch

from tests.patches.moe_cp_compaction.forward_context.standins import (
    build_moe,
    cp_rank_scope,
    eager_forward_context,
    prepare_cp_rank,
    upstream_forward_deepep,
)

CP_SIZE, LENS = 2, [5, 9, 7]  # 21 tokens: both layouts pad each rank's shard (1 and 2 dummy rows)


@pytest.fixture(scope="module")
def moe():
    """Upstream's own ``DeepseekV2MoE.__init__``, then the DeepEP stand-ins (tests/patches/moe_cp_compaction/forward_context/standins.py)."""
    return build_moe()


def cp_rank(strategy: str, rank: int):
    """This process as CP rank ``rank``: upstream's strategy object bound, DeepEP selected, EP over the CP ranks."""
    return cp_rank_scope(strategy, CP_SIZE, rank)


def cp_local_batch(strategy_obj, hidden: int):
    """Upstream's preparation of this rank: a real ForwardBatch, its CP metadata and padding, the local rows."""
    x = torch.randn(sum(LENS), hidden, generator=torch.Generator().manual_seed(0))
    return prepare_cp_rank(strategy_obj, LENS, x)


def run_upstream(moe, local, batch):
    """Upstream's own forward_deepep under the eager runner's forward context; what each stage received."""
    from sglang.srt.model_executor.forward_context import get_forward_context

    layer, rec = moe
    rec.gate.clear(), rec.shared.clear(), rec.topk.clear()
    layer.experts.dispatcher.received.clear()
    with eager_forward_context(batch), torch.no_grad():
        bound = get_forward_context().moe_num_token_non_padded()
        upstream_forward_deepep()(layer, local, batch)
    (gate,), (shared,), (sent,) = rec.gate, rec.shared, layer.experts.dispatcher.received
    return dict(bound=int(bound), gate=gate.shape[0], shared=shared.shape[0],
                routed=(sent["topk_ids"] >= 0).any(dim=1))  # fmt: skip


@pytest.mark.parametrize("rank", range(CP_SIZE))
def test_zigzag_dispatches_every_dummy_row(moe, rank):
    with cp_rank("zigzag", rank) as strategy:
        batch, local, dummy = cp_local_batch(strategy, moe[0].config.hidden_size)
        valid = batch.attn_cp_metadata.per_rank_logical_token[rank]
        assert dummy.sum() == local.shape[0] - valid > 0  # pad_local_rows padded this shard at its end
        seen = run_upstream(moe, local, batch)
    # layers/cp/base.py: the count is forward_batch.num_token_non_padded, the batch's global token count
    assert seen["bound"] == sum(LENS) > local.shape[0]
    assert seen["gate"] == seen["shared"] == local.shape[0]  # gate and shared experts on the dummy rows
    assert bool(seen["routed"][dummy].all())  # upstream's leak: every dummy row reaches DeepEP dispatch
    assert bool(seen["routed"][~dummy].all())


@pytest.mark.parametrize("rank", range(CP_SIZE))
def test_interleave_gates_dummy_rows_and_masks_their_dispatch(moe, rank):
    with cp_rank("interleave", rank) as strategy:
        batch, local, dummy = cp_local_batch(strategy, moe[0].config.hidden_size)
        valid = batch.attn_cp_metadata.per_rank_logical_token[rank]
        assert dummy.sum() == local.shape[0] - valid > 0
        seen = run_upstream(moe, local, batch)
    # layers/cp/interleave.py: the count is this rank's per_rank_logical_token (dummy rows are a suffix)
    assert seen["bound"] == valid
    assert seen["gate"] == seen["shared"] == local.shape[0]  # upstream's leak: gate and shared experts
    assert not bool(seen["routed"][dummy].any())  # top-k ids -1: not dispatched
    assert bool(seen["routed"][~dummy].all())


def test_interleave_count_ignores_a_swapped_num_token_non_padded(moe):
    """Why the 0.5.23 port of the boundary must state the compact count through the forward context."""
    for strategy, follows in (("interleave", False), ("zigzag", True)):
        with cp_rank(strategy, 1) as strat:
            batch, _, _ = cp_local_batch(strat, moe[0].config.hidden_size)
            batch.num_token_non_padded = torch.tensor(1, dtype=torch.int32)
            assert (int(batch.moe_num_token_non_padded()) == 1) is follows, strategy
