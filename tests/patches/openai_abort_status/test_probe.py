"""The "still needed?" probe of openai-abort-status on the installed pin's real tokenizer manager."""

from __future__ import annotations

from sglang_overlay.core.installed import installed_sglang_version
from sglang_overlay.core.needed import run_probe
from sglang_overlay.core.registry import NEEDED, discover_patches
from sglang_overlay.patches.openai_abort_status import probe


def _patch():
    return next(p for p in discover_patches(installed_sglang_version()) if p.id == "openai-abort-status")


def test_upstream_still_mishandles_int_like_abort_codes():
    found, _ = run_probe(_patch().probe)
    assert found.verdict == NEEDED, found
    assert found.evidence.startswith("TokenizerManager._handle_abort_finish_reason, non-streaming: ")
    assert "numpy 503 -> HTTPException with a int64 status" in found.evidence  # upstream passes numpy on to h11


def test_the_probe_reads_upstreams_real_method_and_judges_each_code():
    """The judging on upstream's method: its own HTTP error is right, the others are named."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    method = getattr(TokenizerManager._handle_abort_finish_reason, "__wrapped__",
                     TokenizerManager._handle_abort_finish_reason)  # fmt: skip
    assert probe._answer(method, 503) is None  # int 503: upstream's own 503
    assert probe._answer(method, 400) == "ValueError: probe"  # 400 is upstream's ValueError path (its 400 answer)
    assert probe._answer(method, None) == "a normal finish (HTTP 200, finish_reason abort)"  # graceful
