"""What the MoE boundary (patch moe-cp-compaction, sglang < 0.5.23) refuses and restores, and how it is
installed: a wrong row count and the two-batch-overlap ops fail loudly with the exact messages,
``num_token_non_padded`` comes back after an exception, and the plugin path hooks the boundary when the model
module is imported.

Invariant: a refusal or a failure leaves the batch as it was. Cost: in-process, except one fresh interpreter
(``load_plugins()`` then the deepseek_v2 import, a few seconds).
"""

import pytest
import torch

from sglang_overlay.patches.moe_cp_compaction.errors import MoeCompactionError
from tests.patches.moe_cp_compaction.explicit_count.standins import lane_slot_case
from tests.support.moe_standins import MoeShape, make_forward_batch


def test_wrong_row_count_fails_loudly_and_leaves_the_batch_alone(env):
    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    before = batch.num_token_non_padded
    with pytest.raises(MoeCompactionError) as info:
        env["moe"](torch.cat([local, local]), batch)
    assert str(info.value) == (
        "moe-cp-compaction: DeepseekV2MoE.forward_deepep hidden_states has 12 rows but the forward's lane-slot "
        "layout has 6 CP-local rows (4 valid). The MoE input is not this rank's CP-local rows (e.g. a moe-cp "
        "all-gather before MoE), which this patch does not support; disable it with "
        "SGLANG_OVERLAY_DISABLE=moe-cp-compaction or change the parallel layout."
    )
    assert batch.num_token_non_padded is before


def test_num_token_non_padded_is_restored_when_the_moe_raises(env, monkeypatch):
    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    before = batch.num_token_non_padded

    def broken(*args, **kwargs):
        raise RuntimeError("expert failure")

    monkeypatch.setattr(env["moe"].experts, "run_moe_core", broken)
    with pytest.raises(RuntimeError, match="expert failure"):
        env["moe"](local, batch)
    assert batch.num_token_non_padded is before


def test_two_batch_overlap_ops_refuse_dummy_rows(env):
    from sglang.srt.batch_overlap.operations import _StateDict

    local, layout, batch, _ = lane_slot_case(env, [5, 2, 3], 2, 1)
    state = _StateDict()
    state.update(dict(forward_batch=batch, hidden_states_mlp_input=local))
    with pytest.raises(MoeCompactionError) as info:
        env["moe"].op_gate(state)
    assert str(info.value) == (
        "moe-cp-compaction: the two-batch-overlap MoE ops (op_gate ... op_output) received a forward with "
        "dummy CP rows (ComputePaddingLayout(source='lane-slot', num_rows=6, num_valid=4)); they are not "
        "compacted. Disable two-batch overlap under context parallelism."
    )
    plain = _StateDict()
    plain.update(dict(forward_batch=make_forward_batch([5, 2, 3], 10), hidden_states_mlp_input=local))
    with torch.no_grad():
        env["moe"].op_gate(plain)  # upstream's op_gate, unchanged without dummy rows
    assert plain.router_logits.shape == (local.shape[0], MoeShape().experts)


def test_the_plugin_path_hooks_the_boundary_when_the_model_module_is_imported():
    import subprocess
    import sys

    from tests.support.env import REPO, subprocess_env

    code = (
        "from sglang.srt.plugins import load_plugins\n"
        "load_plugins()\n"
        "import sys\n"
        "assert 'sglang.srt.models.deepseek_v2' not in sys.modules\n"
        "import sglang.srt.models.deepseek_v2 as m\n"
        "from sglang_overlay.core.hooking import status\n"
        "print('HOOKED', len(status()['applied']['moe-cp-compaction']), m.DeepseekV2MoE.forward_deepep.__wrapped__.__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "HOOKED 3 forward_deepep" in proc.stdout
