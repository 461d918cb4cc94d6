"""moe-cp-compaction's start-up refusals on sglang >= 0.5.23 (``moe_cp_compaction.forward_context.startup``):
through upstream's own ``DeepseekV2MoE.__init__``, then the AFTER hook as the HookRegistry runs it; the expected
messages are written out by hand."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from sglang_overlay.errors import OverlayError
from sglang_overlay.patches.moe_cp_compaction.forward_context.startup import refuse_unsupported_at_startup
from tests.patches.moe_cp_compaction.forward_context.standins import cp_rank_scope
from tests.support.moe_standins import deepep_backend_selected

HEAD = "patch 'moe-cp-compaction' cannot keep CP dummy rows out of sparse MoE in layer 1: "
TAIL = ". Change the configuration or disable the patch (SGLANG_OVERLAY_DISABLE=moe-cp-compaction)."
TP_MOE = (
    "without an all-to-all MoE backend (--moe-a2a-backend none) the MoE runs forward_normal "
    "(tensor-parallel experts on rows gathered across CP ranks), which this patch does not "
    "compact (select an all-to-all backend such as --moe-a2a-backend deepep)"
)
BCG = (
    "breakable CUDA graphs capture context-parallel prefill here (prefill CUDA graph backend 'breakable', "
    "which sglang 0.5.23 selects by default where layers/cp/bcg:supports_prefill_cp_bcg holds: "
    "--enable-prefill-cp with --cp-strategy zigzag and the trtllm_mha prefill attention backend, or "
    "--cp-strategy interleave with DSA attention): gate, top-k and this patch's gather and scatter are "
    "captured into graph segments, and a replay re-runs only those segments and the DeepEP all-to-all (the "
    "one eager break), not this patch's Python, on live batches padded to the captured CP-local rows, so "
    "dummy rows would reach gate, top-k and DeepEP (set --cuda-graph-backend-prefill disabled)"
)
TBO = (
    "two-batch overlap runs MoE through op_gate ... op_output, which this patch does not "
    "compact (disable --enable-two-batch-overlap)"
)
MEGA = (
    "the mega-MoE backend runs forward_mega_moe, which this patch does not compact (DeepGEMM MegaMoE, or on "
    "ROCm with SGLANG_AMD_USE_FLYDSL_MEGA_MOE=1 aiter MegaMoEv2; select an all-to-all backend that runs "
    "forward_deepep, such as --moe-a2a-backend deepep)"
)

PPLX = (
    "the MoE a2a backend 'pplx' (--moe-a2a-backend pplx) runs forward_normal, not forward_deepep, which this "
    "patch does not compact (select an all-to-all backend that runs forward_deepep, such as --moe-a2a-backend "
    "deepep)"
)


def _new_layer(moe):
    """A new layer through upstream's own constructor (no hook)."""
    from sglang.srt.models.deepseek_v2 import DeepseekV2MoE

    return DeepseekV2MoE(moe["layer"].config, layer_id=1, quant_config=None)


def _build(moe):
    """A new layer through upstream's own constructor, then the AFTER hook as the HookRegistry runs it."""
    layer = _new_layer(moe)
    refuse_unsupported_at_startup(None, layer, moe["layer"].config, layer_id=1, quant_config=None)
    return layer


def _refusal(moe) -> str:
    with pytest.raises(OverlayError) as info:
        _build(moe)
    return str(info.value)


@contextmanager
def _prefill_cp(*, strategy="zigzag", graphs="breakable", attention="trtllm_mha", cp_size=2):
    """A prefill-CP server as 0.5.23 reads it: CP rank 0 of the simulated CP world (``cp_rank_scope``, the a2a
    backend left to the test), the prefill CUDA graph backend in the ``exec.graph`` bag, and as the process's
    server args a real, unresolved ``ServerArgs`` with the operator's flags (what ``supports_prefill_cp_bcg``
    reads; resolution would refuse trtllm_mha without an SM90+ GPU)."""
    from sglang.srt.model_executor.cuda_graph_config import Phase, with_phase
    from sglang.srt.runtime_context import get_context, get_exec, get_server_args
    from sglang.srt.server_args import ServerArgs

    flags = dict(enable_prefill_cp=True, tp_size=cp_size, attn_cp_size=cp_size, cp_strategy=strategy,
                 prefill_attention_backend=attention, cuda_graph_backend_prefill=graphs)  # fmt: skip
    operator = ServerArgs(model_path=get_server_args().model_path, device="cpu", skip_tokenizer_init=True, **flags)
    graph = get_exec().graph
    prefill_graphs = with_phase(graph.cuda_graph_config, Phase.PREFILL, backend=graphs)
    with pytest.MonkeyPatch.context() as mp, cp_rank_scope(strategy, cp_size, 0, a2a_backend=None):
        mp.setattr(get_context(), "_server_args", operator)
        with graph.override(cuda_graph_config=prefill_graphs):
            yield


def _upstream_captures_cp_prefill() -> bool:
    """What ``PrefillCudaGraphRunner.__init__`` would set ``enable_cp_bcg_capture`` to (backend aside)."""
    from sglang.srt.layers.cp.bcg import supports_prefill_cp_bcg
    from sglang.srt.runtime_context import get_server_args

    return supports_prefill_cp_bcg(get_server_args())


@pytest.mark.parametrize(
    "config,a2a,expected",
    [
        (dict(graphs="disabled"), "none", [TP_MOE]),
        (dict(), "deepep", [BCG]),  # zigzag + trtllm_mha + breakable: upstream captures CP prefill
        (dict(), "none", [TP_MOE, BCG]),  # every problem named at once
        (dict(graphs="disabled"), "megamoe", [MEGA]),
        (dict(graphs="disabled"), "deepep+tbo", [TBO]),
    ],
    ids=["tp-moe", "breakable-cp-graphs", "all-at-once", "mega-moe", "two-batch-overlap"],
)
def test_refusals_name_the_configuration_and_what_to_change(moe, config, a2a, expected):
    from contextlib import ExitStack

    from sglang.srt.layers.moe.utils import MoeA2ABackend
    from sglang.srt.runtime_context import get_exec, get_flags

    with ExitStack() as stack:
        stack.enter_context(_prefill_cp(**config))
        if a2a.startswith("deepep"):
            stack.enter_context(deepep_backend_selected())
        if a2a == "deepep+tbo":
            stack.enter_context(get_exec().overlap.override(enable_two_batch_overlap=True))
        if a2a == "megamoe":
            flags = get_flags().moe
            saved, flags.a2a_backend = flags.a2a_backend, MoeA2ABackend.MEGAMOE
            stack.callback(setattr, flags, "a2a_backend", saved)
        assert _upstream_captures_cp_prefill()  # zigzag + trtllm_mha: upstream's CP BCG predicate holds
        assert _refusal(moe) == HEAD + "; ".join(expected) + TAIL


def test_an_a2a_backend_that_does_not_run_forward_deepep_is_named(moe):
    """pplx (like flashinfer_megamoe, ascend_tp, customized) leaves ``_enable_a2a_moe`` False: forward_normal.
    Upstream's constructor refuses pplx on the CPU (its dispatcher), so the hook runs on a layer built with
    ``--moe-a2a-backend none`` while the flag says pplx."""
    from sglang.srt.layers.moe.utils import MoeA2ABackend
    from sglang.srt.runtime_context import get_flags

    flags = get_flags().moe
    with _prefill_cp(graphs="disabled"):
        layer = _new_layer(moe)
        saved, flags.a2a_backend = flags.a2a_backend, MoeA2ABackend.PPLX
        try:
            with pytest.raises(OverlayError) as info:
                refuse_unsupported_at_startup(None, layer)
        finally:
            flags.a2a_backend = saved
    assert str(info.value) == HEAD + PPLX + TAIL


@pytest.mark.parametrize(
    "config",
    [
        dict(graphs="disabled"),  # CP prefill runs eagerly
        dict(strategy="interleave"),  # breakable, but upstream keeps these CP batches off the graph runner
        dict(attention="fa3"),  # likewise: zigzag CP graphs need trtllm_mha
        dict(graphs="full"),  # only a breakable runner captures CP prefill
    ],
)
def test_deepep_under_cp_without_cp_graph_capture_builds(moe, config):
    with _prefill_cp(**config), deepep_backend_selected():
        layer = _build(moe)
    assert layer._enable_a2a_moe and type(layer.experts).__name__ == "DeepEPMoE"


@pytest.mark.parametrize("a2a", ["none", "deepep"])
def test_without_cp_nothing_is_refused(moe, a2a):
    from sglang.srt.model_executor.cuda_graph_config import Phase, with_phase
    from sglang.srt.runtime_context import get_exec

    graph = get_exec().graph
    with graph.override(cuda_graph_config=with_phase(graph.cuda_graph_config, Phase.PREFILL, backend="breakable")):
        if a2a == "deepep":
            with deepep_backend_selected():
                assert _build(moe)._enable_a2a_moe
        else:
            assert not _build(moe)._enable_a2a_moe
