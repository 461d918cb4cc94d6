"""A real upstream ``DeepseekV2MoE`` on the CPU, with stand-ins only for DeepEP.

``build_deepseek_moe()`` constructs upstream's ``DeepseekV2MoE`` through its own
``__init__`` (real ``MoEGate``, real grouped ``TopK`` with correction bias, real
``DeepseekV2MLP`` shared experts, on one-process gloo groups), then replaces two
things that need a GPU or a cluster:

- ``experts``: :class:`ExpertsStandIn` with :class:`DeepEPDispatcherStandIn`
  (DeepEPMoE needs the ``deep_ep`` library, CUDA and an EP group). The stand-in
  routes rows to experts by the top-k ids and weights in plain torch, on one rank
  that owns every expert, and records what the dispatcher received.
- ``_enable_a2a_moe = True``: upstream computes it from the a2a backend
  (``--moe-a2a-backend deepep``), which cannot be selected without DeepEP; it is
  the flag ``DeepseekV2MoE.forward`` reads to route to ``forward_deepep``.

``deepep_backend_selected()`` selects the DeepEP backend for *construction* only
(start-up checks): upstream's own ``DeepseekV2MoE.__init__`` builds a real
``DeepEPMoE`` and computes ``_enable_a2a_moe`` itself; the one stand-in is the
DeepEP dispatcher's constructor (:class:`DeepEPDispatcherConstructionStandIn`),
which imports ``deep_ep`` and needs CUDA.

``Recorder`` notes what gate, shared experts and top-k received (forward
pre-hooks). :func:`reference_moe` is an independent dense per-row MoE (its own
DeepSeek-V3 grouped routing) to compare against.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class MoeShape:
    hidden: int = 32
    experts: int = 16
    top_k: int = 4
    n_group: int = 4
    topk_group: int = 2
    inter: int = 24
    shared: int = 1
    routed_scaling_factor: float = 2.5
    vocab: int = 100


class DeepEPDispatcherStandIn:
    """Stand-in for DeepEP's dispatcher on one rank that owns every expert:
    dispatch keeps the rows local, combine returns the experts' output. Records
    every dispatch (rows, top-k ids, top-k weights)."""

    def __init__(self, record: bool = True):
        self.record = record
        self.received: list[dict] = []
        self._pending = None

    def dispatch(self, hidden_states, topk_output):
        if self.record:
            self.received.append(
                dict(
                    hidden_states=hidden_states.clone(),
                    topk_ids=topk_output.topk_ids.clone(),
                    topk_weights=topk_output.topk_weights.clone(),
                )
            )
        return hidden_states, topk_output.topk_ids, topk_output.topk_weights

    def combine(self, expert_output):
        return expert_output

    # the two-batch-overlap halves (op_dispatch_a/b, op_combine_a/b)
    def dispatch_a(self, hidden_states, topk_output, tbo_subbatch_index=None):
        self._pending = self.dispatch(hidden_states, topk_output)

    def dispatch_b(self, tbo_subbatch_index=None):
        out, self._pending = self._pending, None
        return out

    def combine_a(self, combine_input, tbo_subbatch_index=None):
        self._pending = self.combine(combine_input)

    def combine_b(self, tbo_subbatch_index=None):
        out, self._pending = self._pending, None
        return out


class DeepEPDispatcherConstructionStandIn:
    """Stand-in for constructing ``DeepEPDispatcher`` (``deep_ep`` + CUDA): keeps the keyword
    arguments upstream passed, never dispatches (layers built with it are only checked)."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


@contextmanager
def deepep_backend_selected():
    """``--moe-a2a-backend deepep`` for building MoE layers on the CPU (see the module docstring)."""
    import sglang.srt.batch_overlap.two_batch_overlap as tbo
    from sglang.srt.layers.moe.utils import MoeA2ABackend
    from sglang.srt.runtime_context import get_flags

    flags = get_flags().moe
    saved = flags.a2a_backend, tbo.DeepEPDispatcher
    flags.a2a_backend, tbo.DeepEPDispatcher = MoeA2ABackend.DEEPEP, DeepEPDispatcherConstructionStandIn
    try:
        yield
    finally:
        flags.a2a_backend, tbo.DeepEPDispatcher = saved


def expert_mlp(w13: torch.Tensor, w2: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """SiLU-gated MLP: gate and up stacked in ``w13`` ([2I, H]), down ``w2`` ([H, I])."""
    gate, up = (x @ w13.t()).chunk(2, dim=-1)
    return (F.silu(gate) * up) @ w2.t()


class ExpertsStandIn(nn.Module):
    """Stand-in for DeepEPMoE: dispatch, per-expert MLP by top-k ids and weights, combine."""

    should_fuse_routed_scaling_factor_in_topk = False

    def __init__(self, shape: MoeShape, seed: int, dtype=torch.float32, record: bool = True, device: str = "cpu"):
        super().__init__()
        e, h, i = shape.experts, shape.hidden, shape.inter
        g = torch.Generator(device=device).manual_seed(seed)
        # drawn where they live: at DeepSeek-V3 size (256 x 7168 x 2048) they are tens of GB
        self.w13 = nn.Parameter(torch.randn(e, 2 * i, h, generator=g, device=device, dtype=dtype) * h**-0.5)
        self.w2 = nn.Parameter(torch.randn(e, h, i, generator=g, device=device, dtype=dtype) * i**-0.5)
        self.dispatcher = DeepEPDispatcherStandIn(record)

    def run_moe_core(self, dispatch_output):
        x, ids, weights = dispatch_output
        out = torch.zeros_like(x)
        for e in torch.unique(ids[ids >= 0]).tolist():
            rows, slot = (ids == e).nonzero(as_tuple=True)
            y = expert_mlp(self.w13[e], self.w2[e], x[rows])
            out.index_add_(0, rows, y * weights[rows, slot, None].to(y.dtype))
        return out

    def forward(self, hidden_states, topk_output):
        dispatch_output = self.dispatcher.dispatch(hidden_states, topk_output)
        return self.dispatcher.combine(self.run_moe_core(dispatch_output))


@dataclass
class Recorder:
    """What gate, shared experts and top-k received, call by call."""

    gate: list = field(default_factory=list)
    shared: list = field(default_factory=list)
    topk: list = field(default_factory=list)  # dicts: hidden_states, router_logits, num_token_non_padded

    def attach(self, moe) -> None:
        moe.gate.register_forward_pre_hook(lambda m, args, kw: self.gate.append(args[0].clone()), with_kwargs=True)
        moe.shared_experts.register_forward_pre_hook(
            lambda m, args, kw: self.shared.append(args[0].clone()), with_kwargs=True
        )

        def on_topk(m, args, kw):
            hs = kw.get("hidden_states", args[0] if args else None)
            logits = kw.get("router_logits", args[1] if len(args) > 1 else None)
            ntnp, ids = kw.get("num_token_non_padded"), kw.get("input_ids")
            self.topk.append(
                dict(
                    hidden_states=hs.clone(),
                    router_logits=logits.clone(),
                    num_token_non_padded=None if ntnp is None else ntnp.clone(),
                    input_ids=None if ids is None else ids.clone(),
                )
            )

        moe.topk.register_forward_pre_hook(on_topk, with_kwargs=True)


def expert_location_metadata(num_layers: int, num_experts: int, device: str = "cpu"):
    """Upstream's trivial expert placement (logical expert i = physical expert i), one EP rank."""
    from sglang.srt.eplb.expert_location import ExpertLocationMetadata

    physical_to_logical = torch.arange(num_experts, device=device).repeat(num_layers, 1)
    return ExpertLocationMetadata._init_raw(
        ep_size=1,
        physical_to_logical_map=physical_to_logical,
        logical_to_all_physical_map=physical_to_logical[..., None].clone(),
        moe_ep_rank=0,
    )


def make_forward_batch(lens, num_token_non_padded, device="cpu"):
    """A real upstream ForwardBatch for an extend of requests with these lengths."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    n = max(sum(lens), 1)
    batch = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=len(lens),
        input_ids=torch.zeros(n, dtype=torch.long),
        req_pool_indices=torch.zeros(len(lens), dtype=torch.long),
        seq_lens=torch.tensor(lens, dtype=torch.long),
        out_cache_loc=torch.zeros(n, dtype=torch.long),
        seq_lens_sum=sum(lens),
    )
    batch.extend_seq_lens_cpu = list(lens)
    if num_token_non_padded is not None:
        batch.num_token_non_padded = torch.tensor(num_token_non_padded, dtype=torch.int32, device=device)
    return batch


def reference_moe(moe, x: torch.Tensor, input_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Dense per-row DeepSeek-V3 MoE on ``x`` (valid rows only), independent of
    upstream's top-k: sigmoid scores, grouped selection with correction bias (or,
    for a hash layer, the experts its token-id table names), renormalized
    weights, routed scaling, plus the shared experts."""
    cfg = moe.config
    n, e = x.shape[0], cfg.n_routed_experts
    scores = (x @ moe.gate.weight.t()).sigmoid()
    if moe.is_hash:
        ids = moe.topk.tid2eid[input_ids].long()
    else:
        choice = scores + moe.gate.e_score_correction_bias
        groups = choice.view(n, cfg.n_group, e // cfg.n_group)
        group_score = groups.topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros_like(group_score, dtype=torch.bool)
        keep.scatter_(1, group_score.topk(cfg.topk_group, dim=-1).indices, True)
        choice = choice.masked_fill(~keep.repeat_interleave(e // cfg.n_group, dim=1), float("-inf"))
        ids = choice.topk(cfg.num_experts_per_tok, dim=-1).indices
    weights = scores.gather(1, ids)
    weights = weights / weights.sum(-1, keepdim=True)
    every = torch.stack([expert_mlp(moe.experts.w13[j], moe.experts.w2[j], x) for j in range(e)], dim=1)
    routed = (every.gather(1, ids[..., None].expand(-1, -1, x.shape[1])) * weights[..., None]).sum(1)
    shared = expert_mlp(moe.shared_experts.gate_up_proj.weight, moe.shared_experts.down_proj.weight, x)
    return shared + cfg.routed_scaling_factor * routed
