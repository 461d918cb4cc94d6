"""Shared fixture of the moe-cp-compaction tests: the overlay applied in-process and one
upstream DeepseekV2MoE with DeepEP stand-ins (tests/support/moe_standins.py; the builder: explicit_count/standins.py)."""

import pytest

import sglang_overlay
from tests.patches.moe_cp_compaction.explicit_count.standins import build_deepseek_moe


@pytest.fixture(scope="session")
def env():
    sglang_overlay.apply()
    from sglang.srt.models.deepseek_v2 import DeepseekV2MoE

    from sglang_overlay.core.hooking import status

    assert len(status()["applied"]["moe-cp-compaction"]) == 3  # hooked when deepseek_v2 was imported
    moe, recorder = build_deepseek_moe()
    return dict(
        moe=moe,
        rec=recorder,
        cls=DeepseekV2MoE,
        upstream=DeepseekV2MoE.forward_deepep.__wrapped__,
    )
