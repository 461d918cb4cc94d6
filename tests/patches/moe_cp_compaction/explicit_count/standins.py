"""Release folder ``explicit_count/`` (sglang < 0.5.23): upstream's ``DeepseekV2MoE`` built by its own
``__init__`` on one-process gloo groups, with the DeepEP stand-ins of ``tests/support/moe_standins.py``.

Why here: the builder is written against this release (``initialize_model_parallel(1, ...)`` and
``MoeFlags.disable_shared_experts_fusion`` are gone in 0.5.23; ``forward_context/standins.py`` is that release's
counterpart). :func:`layer_and_upstream` is the adapter both folders define for the benchmarks
(``scripts/bench_moe_compaction.py`` picks the folder serving the installed sglang through the registry).

Invariant: only upstream's own classes are built; the stand-ins are DeepEP's experts and dispatcher.
Cost: one gloo world per process (idempotent), a layer's construction (tenths of a second at test sizes).
"""

from __future__ import annotations

import socket
from contextlib import contextmanager

import torch

from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout
from sglang_overlay.patches.moe_cp_compaction.producers import lane_slot_layout, lane_slot_tokens
from tests.support.moe_standins import ExpertsStandIn, MoeShape, Recorder, expert_location_metadata, make_forward_batch
from tests.support.runtime import publish_cpu_runtime


def layer_and_upstream(shape: MoeShape, *, dtype, device, record: bool = False):
    """``(moe, recorder or None, upstream's unhooked forward_deepep)`` for this release."""
    from sglang.srt.models.deepseek_v2 import DeepseekV2MoE

    moe, recorder = build_deepseek_moe(shape, dtype=dtype, device=str(device), record=record)
    return moe, recorder, getattr(DeepseekV2MoE.forward_deepep, "__wrapped__", DeepseekV2MoE.forward_deepep)


def _publish_accelerator_runtime(device_type: str) -> None:
    """The tiny config of tests.support.runtime, published for an accelerator (benchmarks)."""
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    from tests.support.runtime import tiny_model_dir

    publish(
        ServerArgs(model_path=str(tiny_model_dir()), device=device_type, skip_tokenizer_init=True), role="scheduler"
    )


def init_parallel(device: str = "cpu") -> None:
    """Runtime context, one-process gloo world and model-parallel groups (idempotent)."""
    from sglang.srt.distributed import parallel_state as ps

    device_type = torch.device(device).type
    if device_type == "cpu":
        publish_cpu_runtime()  # idempotent
    if ps.model_parallel_is_initialized():
        return
    if device_type != "cpu":
        _publish_accelerator_runtime(device_type)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ps.init_distributed_environment(
        world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", local_rank=0, backend="gloo"
    )
    ps.initialize_model_parallel(1, backend="gloo")


@contextmanager
def _shared_experts_unfused():
    """What a model's gate does before its layers build: decide shared-expert fusion."""
    from sglang.srt.runtime_context import get_flags

    moe_flags = get_flags().moe
    saved = moe_flags.disable_shared_experts_fusion
    moe_flags.disable_shared_experts_fusion = True
    try:
        yield
    finally:
        moe_flags.disable_shared_experts_fusion = saved


def build_deepseek_moe(
    shape: MoeShape = MoeShape(),
    layer_id: int = 1,
    seed: int = 0,
    dtype=torch.float32,
    hash_routing: bool = False,
    device: str = "cpu",
    record: bool = True,
):
    """Upstream DeepseekV2MoE with DeepEP stand-ins; returns (moe, Recorder or None).

    ``hash_routing``: the layer routes by token id (upstream ``HashTopK``, as the
    first ``num_hash_layers`` layers of DeepSeek-V4 do). ``record=False`` keeps
    no copies of what gate, top-k and dispatcher receive (benchmarks)."""
    init_parallel(device)
    from sglang.srt.models.deepseek_v2 import DeepseekV2MoE
    from transformers import DeepseekV3Config

    config = DeepseekV3Config(
        hidden_size=shape.hidden,
        moe_intermediate_size=shape.inter,
        n_routed_experts=shape.experts,
        num_experts_per_tok=shape.top_k,
        n_group=shape.n_group,
        topk_group=shape.topk_group,
        n_shared_experts=shape.shared,
        routed_scaling_factor=shape.routed_scaling_factor,
        vocab_size=shape.vocab,
        num_hidden_layers=layer_id + 1,
        norm_topk_prob=True,
    )
    config.topk_method = "noaux_tc"
    config.scoring_func = "sigmoid"
    config.num_hash_layers = layer_id + 1 if hash_routing else 0
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    # as the model loader builds layers: parameters in the model dtype, explicit ones (the fp32
    # correction bias) as declared
    with _shared_experts_unfused(), set_default_torch_dtype(dtype):
        moe = DeepseekV2MoE(config, layer_id=layer_id, quant_config=None, prefix=f"model.layers.{layer_id}.mlp")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        moe.gate.weight.copy_(torch.randn(moe.gate.weight.shape, generator=g))
        if moe.gate.e_score_correction_bias is not None:
            moe.gate.e_score_correction_bias.copy_(torch.randn(shape.experts, generator=g) * 0.1)
        for p in moe.shared_experts.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
    from sglang.srt.eplb.expert_location import set_global_expert_location_metadata

    # The model runner publishes this at start-up; forward_deepep's top-k reads it.
    set_global_expert_location_metadata(
        expert_location_metadata(layer_id + 1, shape.experts, device), allow_overwrite=True
    )
    moe.experts = ExpertsStandIn(shape, seed + 1, dtype, record, device)
    moe._enable_a2a_moe = True
    moe.to(device=device).eval()
    recorder = Recorder() if record else None
    if recorder is not None:
        recorder.attach(moe)
    return moe, recorder


def lane_slot_case(env, lens, n, r, seed=0):
    """Rank r's padded rows (dummy rows hold large garbage), the layout, the batch tokens."""
    g = torch.Generator().manual_seed(seed)
    hidden = MoeShape().hidden
    tokens_x = torch.randn(sum(lens), hidden, generator=g)
    tok = lane_slot_tokens(lens, n, r)
    local = torch.randn(tok.numel(), hidden, generator=g) * 100
    local[tok >= 0] = tokens_x[tok[tok >= 0]]
    layout = lane_slot_layout(lens, n, r)
    # what upstream would pass: the rank's whole row count (no suffix is padding here)
    batch = make_forward_batch(lens, tok.numel())
    attach_layout(batch, layout)
    return local, layout, batch, tokens_x[tok[tok >= 0]]
