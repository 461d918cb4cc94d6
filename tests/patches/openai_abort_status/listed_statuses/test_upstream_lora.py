"""Upstream sglang < 0.5.23's own LoRA accounting of aborted requests (the patch off): released twice or never.

Counted by the root test_lora_release.py's fresh interpreter (upstream's own ``LoRARegistry``).
"""

from __future__ import annotations

import pytest

from tests.patches.openai_abort_status.lora_accounting import MODES, run_accounting

pytestmark = pytest.mark.ci_slow  # the LoRA driver in a fresh process


def test_upstream_releases_twice_or_never():
    """0.5.20 as shipped (the patch off): its 500/503 branch releases again after
    ``_handle_batch_output`` did (-1), and the scheduler's abort echo releases only for 500/503
    (+1 for every other code, a graceful abort included)."""
    upstream = run_accounting(SGLANG_OVERLAY_DISABLE="openai-abort-status")
    counts = {case: result["count"] for case, result in upstream.items()}
    assert counts["finished/output/stream"] == counts["finished/output/non_stream"] == 0
    for mode in MODES:
        # codes that compare equal to HTTPStatus 500/503 take upstream's releasing branch
        for key in ("httpstatus_503", "int_503", "np_503", "float_503"):
            assert counts[f"{key}/output/{mode}"] == -1, key
            assert counts[f"{key}/abort_req/{mode}"] == 0, key
        for key in ("none", "str_503", "intenum_429", "httpstatus_400"):
            assert counts[f"{key}/output/{mode}"] == 0, key
            assert counts[f"{key}/abort_req/{mode}"] == 1, key
