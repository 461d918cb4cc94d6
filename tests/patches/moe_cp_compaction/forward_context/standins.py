"""Release folder ``forward_context/`` (sglang >= 0.5.23): a real upstream ``DeepseekV2MoE`` on upstream's real
CP path, on the CPU, one process playing each CP rank in turn; stand-ins only for DeepEP and the CP world's
group handles.

This module reuses the version-free stand-ins of ``tests/support/moe_standins.py`` (``ExpertsStandIn``,
``Recorder``, ``expert_location_metadata``). :func:`layer_and_upstream` is the adapter every release folder's
``standins`` defines for the benchmarks. Used by tests/patches/moe_cp_compaction/forward_context/ and scripts/bench_moe_compaction.py.
Cost: one gloo world per process (idempotent), a layer's construction (tenths of a second at test sizes).

Real upstream 0.5.23 code on the path:
  * ``DeepseekV2MoE`` built by its own ``__init__`` (real ``MoEGate``, grouped ``TopK`` with correction
    bias, real ``DeepseekV2MLP`` shared experts) on one-process gloo groups (:func:`build_moe`);
  * the strategy objects of ``layers/cp/base.py:init_cp_strategy`` (:func:`cp_rank_scope`);
  * a real ``ForwardBatch`` (EXTEND); ``is_cp_active`` and ``prepare_cp_forward`` (``build_metadata`` and
    ``pad_logical_token_to_physical``); the CP-local rows from ``strategy.shard_hidden_states`` (which ends
    in ``padding.pad_local_rows``); ``num_token_non_padded`` as the eager runner makes it
    (``_init_num_token_non_padded`` and ``set_local_num_token_non_padded(sharded=False)``, what
    ``_prepare_eager_forward_batch`` does under MLA / DSA prefill CP) (:func:`prepare_cp_rank`);
  * ``forward_context(get_forward_context(), forward_batch=batch)`` as ``EagerRunner._execute_extend`` enters
    it, so top-k's count is ``ForwardBatch.moe_num_token_non_padded`` (:func:`eager_forward_context`).
Stand-ins (named as such, all because they need CUDA, deep_ep or several processes):
  * ``ExpertsStandIn`` / ``DeepEPDispatcherStandIn`` (tests/support/moe_standins.py) for DeepEPMoE and its
    dispatcher (it records the rows and top-k ids it receives); ``_enable_a2a_moe = True``;
  * the MoE a2a backend flag set to DEEPEP inside :func:`cp_rank_scope` (``is_moe_input_scattered_across_dp_ranks``
    reads it; nothing on this path imports deep_ep);
  * :class:`GroupStandIn`: tp / attn_cp / moe_ep group handles of the CP world (``get_parallel().override``
    validates the widths against the groups; no collective runs on this path);
  * :class:`AttnBackendStandIn`: the forward context's mandatory attention backend (not read on this path).
"""

from __future__ import annotations

import socket
from contextlib import contextmanager

import torch

from tests.support.moe_standins import ExpertsStandIn, MoeShape, Recorder, expert_location_metadata

__all__ = [
    "AttnBackendStandIn", "GroupStandIn", "build_moe", "cp_rank_scope", "eager_forward_context",
    "init_parallel", "layer_and_upstream", "prepare_cp_rank", "upstream_forward_deepep",
]  # fmt: skip


def layer_and_upstream(shape: MoeShape, *, dtype, device, record: bool = False):
    """``(moe, recorder or None, upstream's unhooked forward_deepep)`` for this release."""
    moe, recorder = build_moe(shape, dtype=dtype, record=record, device=device)
    return moe, recorder, upstream_forward_deepep()


class GroupStandIn:
    """Stand-in for a process-group handle of the simulated CP world (its width; nothing communicates)."""

    def __init__(self, world_size: int, rank_in_group: int):
        self.world_size = world_size
        self.rank_in_group = rank_in_group
        self.device_group = None  # read when MoE layers are built (DeepEP's comm group); never used to communicate


class AttnBackendStandIn:
    """Stand-in for the forward context's attention backend (the MoE path does not read it)."""


def init_parallel() -> None:
    """The one-process gloo world of moe_standins.init_parallel, written for 0.5.23: a rank bundle at
    publish (rank reads such as ``moe_ep_rank`` in ``FusedMoE.__init__`` raise without one) and
    ``initialize_model_parallel`` reading the widths from ``get_parallel()`` (idempotent)."""
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import ServerArgs

    from tests.support.runtime import tiny_model_dir

    if ps.model_parallel_is_initialized():
        return
    publish(ServerArgs(model_path=str(tiny_model_dir()), device="cpu", skip_tokenizer_init=True),
            role="scheduler", ranks=SpawnRanks(world_rank=0))  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ps.init_distributed_environment(
        world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", local_rank=0, backend="gloo"
    )
    ps.initialize_model_parallel(backend="gloo")


def build_moe(
    shape: MoeShape = MoeShape(), layer_id: int = 1, seed: int = 0, dtype=torch.float32, record: bool = True,
    device: str = "cpu",
):  # fmt: skip
    """Upstream's own ``DeepseekV2MoE.__init__`` (0.5.23 reads shared-expert fusion from the published model
    bag: 0 for the tiny published model), then the DeepEP stand-ins and ``_enable_a2a_moe``; returns
    ``(moe, Recorder)`` (``record=False``: no Recorder and no copies of the inputs, for benchmarks). ``device``:
    where the layer lives (the experts' stand-in weights are drawn there: tens of GB at DeepSeek-V3 size)."""
    init_parallel()
    from sglang.srt.eplb.expert_location import set_global_expert_location_metadata
    from sglang.srt.model_loader.utils import set_default_torch_dtype
    from sglang.srt.models.deepseek_v2 import DeepseekV2MoE
    from transformers import DeepseekV3Config

    config = DeepseekV3Config(
        hidden_size=shape.hidden, moe_intermediate_size=shape.inter, n_routed_experts=shape.experts,
        num_experts_per_tok=shape.top_k, n_group=shape.n_group, topk_group=shape.topk_group,
        n_shared_experts=shape.shared, routed_scaling_factor=shape.routed_scaling_factor,
        vocab_size=shape.vocab, num_hidden_layers=layer_id + 1, norm_topk_prob=True,
    )  # fmt: skip
    config.topk_method, config.scoring_func, config.num_hash_layers = "noaux_tc", "sigmoid", 0
    with set_default_torch_dtype(dtype):
        moe = DeepseekV2MoE(config, layer_id=layer_id, quant_config=None, prefix=f"model.layers.{layer_id}.mlp")
    assert moe.num_fused_shared_experts == 0 and moe.shared_experts is not None
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        moe.gate.weight.copy_(torch.randn(moe.gate.weight.shape, generator=g))
        moe.gate.e_score_correction_bias.copy_(torch.randn(shape.experts, generator=g) * 0.1)
        for p in moe.shared_experts.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
    placement = expert_location_metadata(layer_id + 1, shape.experts, device=str(device))
    set_global_expert_location_metadata(placement, allow_overwrite=True)
    moe.to(device)
    moe.experts = ExpertsStandIn(shape, seed + 1, dtype, record, device=str(device))
    moe._enable_a2a_moe = True
    moe.eval()
    if not record:
        return moe, None
    rec = Recorder()
    rec.attach(moe)
    return moe, rec


@contextmanager
def cp_rank_scope(strategy: str, cp_size: int, rank: int, *, a2a_backend: str | None = "deepep"):
    """This process as CP rank ``rank`` of ``cp_size`` (attention TP 1, DP 1, EP over the CP ranks): upstream's
    strategy object bound (yielded), the MoE a2a backend flag set to ``a2a_backend`` (``None``: left as is)."""
    from sglang.srt.layers.cp.base import get_cp_strategy, init_cp_strategy
    from sglang.srt.layers.moe.utils import MoeA2ABackend
    from sglang.srt.runtime_context import get_flags, get_parallel

    flags = get_flags().moe
    saved = flags.a2a_backend
    backend = saved if a2a_backend is None else MoeA2ABackend(a2a_backend)
    with get_parallel().override(
        enable_prefill_cp=True, cp_strategy=strategy,
        tp_size=cp_size, tp_rank=rank, tp_group=GroupStandIn(cp_size, rank),
        attn_cp_size=cp_size, attn_cp_rank=rank, attn_cp_group=GroupStandIn(cp_size, rank),
        attn_tp_size=1, attn_tp_rank=0, attn_dp_size=1, attn_dp_rank=0,
        moe_ep_size=cp_size, moe_ep_rank=rank, moe_ep_group=GroupStandIn(cp_size, rank),
        moe_dp_size=1, moe_tp_size=1,
    ):  # fmt: skip
        init_cp_strategy(enable_prefill_cp=True, cp_size=cp_size, cp_strategy=strategy)
        flags.a2a_backend = backend
        try:
            yield get_cp_strategy()
        finally:
            flags.a2a_backend = saved
            init_cp_strategy(enable_prefill_cp=False, cp_size=1, cp_strategy=strategy)


def prepare_cp_rank(strategy_obj, lens, x_full: torch.Tensor):
    """Upstream's preparation of this rank for an extend of fresh requests with extend lengths ``lens``:
    a real ForwardBatch, its CP metadata and padding, the CP-local rows of ``x_full`` (one row per token);
    returns ``(batch, local_rows, dummy)``, ``dummy`` the bool mask of the rows ``pad_local_rows`` added."""
    from sglang.srt.layers.cp.utils import is_cp_active, prepare_cp_forward
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    n = sum(lens)
    batch = ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=len(lens), input_ids=torch.arange(n),
        req_pool_indices=torch.arange(len(lens)), seq_lens=torch.tensor(lens), out_cache_loc=torch.arange(n),
        seq_lens_sum=n,
    )  # fmt: skip
    batch.extend_seq_lens_cpu = list(lens)
    batch.seq_lens_cpu = torch.tensor(lens)
    assert is_cp_active(batch), "upstream does not apply CP to this batch"
    prepare_cp_forward(batch)
    local = strategy_obj.shard_hidden_states(x_full, batch)
    # the token of each local row (1-based; 0 = a row pad_local_rows added), sharded the same way
    token = strategy_obj.shard_hidden_states(torch.arange(1, n + 1, dtype=torch.float32)[:, None], batch)[:, 0]
    batch._init_num_token_non_padded(device=torch.device("cpu"), is_draft_worker=False)
    batch.set_local_num_token_non_padded(sharded=False)
    return batch, local, token == 0


@contextmanager
def eager_forward_context(batch):
    """The forward context the eager runner publishes for ``batch`` (``EagerRunner._execute_extend``)."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context, get_forward_context

    with forward_context(ForwardContext(attn_backend=AttnBackendStandIn())):
        with forward_context(get_forward_context(), forward_batch=batch):
            yield


def upstream_forward_deepep():
    """Upstream's own ``DeepseekV2MoE.forward_deepep`` (``__wrapped__`` if the overlay hooked it)."""
    from sglang.srt.models.deepseek_v2 import DeepseekV2MoE

    fn = DeepseekV2MoE.forward_deepep
    return getattr(fn, "__wrapped__", fn)
