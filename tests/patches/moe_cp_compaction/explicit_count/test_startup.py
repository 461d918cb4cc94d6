"""Start-up refusals of moe-cp-compaction: MoE configurations under CP that bypass the boundary.

Every refusal goes through upstream's own ``DeepseekV2MoE.__init__`` (the AFTER hook runs
when the model is built, i.e. at server start-up). The DeepEP backend is selected for real
(upstream builds a ``DeepEPMoE`` and computes ``_enable_a2a_moe`` itself); only the DeepEP
dispatcher's constructor is a stand-in (``deepep_backend_selected``). CP and the prefill
CUDA graph backend are set where upstream reads them: the published ``parallel`` and
``exec.graph`` bags, and the server args that upstream's ``enable_cp_bcg_capture`` reads.
The expected messages are written out by hand.
"""

from contextlib import contextmanager

import pytest
import torch

from sglang_overlay.errors import OverlayError
from sglang_overlay.patches.moe_cp_compaction.errors import MoeCompactionError
from sglang_overlay.patches.moe_cp_compaction.explicit_count.startup import refuse_unsupported_at_startup
from tests.patches.moe_cp_compaction.explicit_count.standins import lane_slot_case
from tests.support.moe_standins import deepep_backend_selected, make_forward_batch

HEAD = "patch 'moe-cp-compaction' cannot keep CP dummy rows out of sparse MoE in layer 1: "
TAIL = ". Change the configuration or disable the patch (SGLANG_OVERLAY_DISABLE=moe-cp-compaction)."
TP_MOE = (
    "without an all-to-all MoE backend (--moe-a2a-backend none) the MoE runs forward_normal "
    "(tensor-parallel experts on rows gathered across CP ranks), which this patch does not "
    "compact (select an all-to-all backend such as --moe-a2a-backend deepep)"
)
BCG = (
    "breakable CUDA graphs capture context-parallel prefill here (prefill CUDA graph backend "
    "'breakable' with --enable-prefill-cp, --cp-strategy zigzag and the trtllm_mha prefill "
    "attention backend): gate, top-k and this patch's gather and scatter are captured into graph "
    "segments, and a replay re-runs only those segments and the DeepEP all-to-all (the one eager "
    "break), not this patch's Python, on live batches padded to the captured CP-local rows, so "
    "dummy rows would reach gate, top-k and DeepEP (set --cuda-graph-backend-prefill disabled)"
)
TBO = (
    "two-batch overlap runs MoE through op_gate ... op_output, which this patch does not "
    "compact (disable --enable-two-batch-overlap)"
)
MEGA = "the mega-MoE backend runs forward_mega_moe, which this patch does not compact"


@contextmanager
def prefill_cp(*, cp_size=2, strategy="zigzag", graphs="breakable", attention="trtllm_mha"):
    """A prefill-CP server: CP in the published ``parallel`` bag, the prefill CUDA graph backend
    in the ``exec.graph`` bag, and as the process's server args a real ``ServerArgs`` with the
    operator's flags for both (what ``enable_cp_bcg_capture`` reads). It stays unresolved:
    upstream's resolution refuses trtllm_mha without a Hopper or Blackwell GPU."""
    from sglang.srt.model_executor.cuda_graph_config import Phase, with_phase
    from sglang.srt.runtime_context import get_context, get_exec, get_parallel, get_server_args
    from sglang.srt.server_args import ServerArgs

    published = get_server_args()
    operator = ServerArgs(
        model_path=published.model_path, device="cpu", skip_tokenizer_init=True, enable_prefill_cp=True,
        tp_size=cp_size, attn_cp_size=cp_size, cp_strategy=strategy, prefill_attention_backend=attention,
        cuda_graph_backend_prefill=graphs,
    )  # fmt: skip
    graph = get_exec().graph
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(get_context(), "_server_args", operator)
        with get_context().config_bag("parallel").override(enable_prefill_cp=True, cp_strategy=strategy), \
                get_parallel().override(attn_cp_size=cp_size), \
                graph.override(cuda_graph_config=with_phase(graph.cuda_graph_config, Phase.PREFILL, backend=graphs)):  # fmt: skip
            yield


def build(env):
    """A new layer through upstream's own constructor (the AFTER hook runs at its end)."""
    return env["cls"](env["moe"].config, layer_id=1, quant_config=None)


def refusal(env) -> str:
    with pytest.raises(OverlayError) as info:
        build(env)
    return str(info.value)


def upstream_enables_cp_breakable_capture() -> bool:
    from sglang.srt.layers.cp.bcg import enable_cp_bcg_capture
    from sglang.srt.runtime_context import get_server_args

    return enable_cp_bcg_capture(get_server_args())


# --------------------------------------------------------------------------- refused


def test_tensor_parallel_moe_under_cp_is_refused(env):
    with prefill_cp(graphs="disabled"):
        assert refusal(env) == HEAD + TP_MOE + TAIL


def test_breakable_cp_prefill_graphs_with_deepep_are_refused(env):
    with prefill_cp(), deepep_backend_selected():
        assert upstream_enables_cp_breakable_capture()  # the runner would capture CP prefill
        assert refusal(env) == HEAD + BCG + TAIL


def test_every_problem_is_named_at_once(env):
    with prefill_cp():  # TP-MoE and breakable CP graphs
        assert refusal(env) == HEAD + TP_MOE + "; " + BCG + TAIL


def test_two_batch_overlap_and_mega_moe_are_refused(env):
    from sglang.srt.layers.moe.utils import MoeA2ABackend
    from sglang.srt.runtime_context import get_exec, get_flags

    with prefill_cp(graphs="disabled"):
        with deepep_backend_selected(), get_exec().overlap.override(enable_two_batch_overlap=True):
            assert refusal(env) == HEAD + TBO + TAIL
        flags = get_flags().moe
        saved = flags.a2a_backend
        flags.a2a_backend = MoeA2ABackend.MEGAMOE
        try:
            assert refusal(env) == HEAD + MEGA + TAIL
        finally:
            flags.a2a_backend = saved


# --------------------------------------------------------------------------- not refused


@pytest.mark.parametrize(
    "config",
    [
        dict(graphs="disabled"),  # CP prefill runs eagerly
        dict(graphs="breakable", strategy="interleave"),  # upstream keeps CP batches off the graph runner
        dict(graphs="breakable", attention="fa3"),  # likewise: CP BCG needs trtllm_mha
        dict(graphs="full"),  # only a breakable runner captures CP prefill
        dict(graphs="tc_piecewise"),
    ],
)
def test_deepep_under_cp_without_cp_graph_capture_builds(env, config):
    with prefill_cp(**config), deepep_backend_selected():
        assert not upstream_enables_cp_breakable_capture() or config["graphs"] != "breakable"
        moe = build(env)
    assert moe._enable_a2a_moe and type(moe.experts).__name__ == "DeepEPMoE"


@pytest.mark.parametrize("a2a", ["none", "deepep"])
def test_without_cp_nothing_is_refused(env, a2a):
    """Do no harm: TP-MoE and breakable prefill graphs stay allowed without prefill CP."""
    from sglang.srt.model_executor.cuda_graph_config import Phase, with_phase
    from sglang.srt.runtime_context import get_exec

    graph = get_exec().graph
    with graph.override(cuda_graph_config=with_phase(graph.cuda_graph_config, Phase.PREFILL, backend="breakable")):
        if a2a == "deepep":
            with deepep_backend_selected():
                assert build(env)._enable_a2a_moe
        else:
            assert not build(env)._enable_a2a_moe
    refuse_unsupported_at_startup(None, env["moe"])


@pytest.mark.parametrize("enable_prefill_cp,cp_size", [(True, 1), (False, 2)])
def test_only_prefill_cp_over_several_ranks_is_checked(env, enable_prefill_cp, cp_size):
    """TP-MoE (refused under prefill CP on two ranks) builds with prefill CP on one rank, and
    with two attention-CP ranks but prefill CP off: no rank holds CP dummy rows."""
    from sglang.srt.runtime_context import get_context, get_parallel

    with get_context().config_bag("parallel").override(enable_prefill_cp=enable_prefill_cp), \
            get_parallel().override(attn_cp_size=cp_size):  # fmt: skip
        assert (get_parallel().enable_prefill_cp, get_parallel().attn_cp_size) == (enable_prefill_cp, cp_size)
        moe = build(env)
    assert not moe._enable_a2a_moe


# --------------------------------------------------------------------------- capture guard (defence in depth)

CAPTURE = (
    "moe-cp-compaction: a CUDA graph is being captured through a context-parallel forward "
    "(ComputePaddingLayout(source='lane-slot', num_rows={rows}, num_valid={valid})); replay would "
    "re-run neither this patch's gather and scatter nor its choice of rows, so CP dummy rows would "
    "reach gate, top-k and DeepEP. Run CP prefill without prefill CUDA graphs "
    "(--cuda-graph-backend-prefill disabled)."
)


@pytest.mark.parametrize("lens,rows,valid", [([5, 2, 3], 6, 4), ([4, 2], 3, 3)])  # dummy rows / none
def test_a_breakable_capture_through_a_cp_forward_raises(env, lens, rows, valid):
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.context import (
        enable_breakable_cuda_graph,
    )

    local, layout, batch, _ = lane_slot_case(env, lens, 2, 1)
    before = batch.num_token_non_padded
    with torch.no_grad(), enable_breakable_cuda_graph():
        with pytest.raises(MoeCompactionError) as info:
            env["moe"](local, batch)
    assert str(info.value) == CAPTURE.format(rows=rows, valid=valid)
    assert batch.num_token_non_padded is before


def test_a_breakable_graph_without_cp_runs_upstream(env):
    """Decode graphs (no CP metadata) keep upstream's path inside a breakable scope."""
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.context import (
        enable_breakable_cuda_graph,
    )

    x = torch.randn(5, env["moe"].config.hidden_size)
    batch = make_forward_batch([5], 5)
    with torch.no_grad():
        expected = env["upstream"](env["moe"], x, batch)
        with enable_breakable_cuda_graph():
            out = env["moe"](x, batch)
    assert torch.equal(out, expected)
