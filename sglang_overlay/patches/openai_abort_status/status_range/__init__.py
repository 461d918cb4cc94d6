"""Serves sglang >=0.5.23 (the pin 0.5.23): release folder ``status_range/`` of openai-abort-status.

The design it serves: upstream treats every status in 400-599 as an abort error.

``finish_reason.py``: normalize the code in place, then upstream decides (it releases state and LoRA
itself). Story: ``patches/openai-abort-status.md``.
"""

from sglang_overlay.core.registry import Release, Target

RELEASE = Release(
    ">=0.5.23",
    targets=(
        Target(
            "sglang.srt.managers.tokenizer_manager",
            "TokenizerManager._handle_abort_finish_reason",
            f"{__name__}.finish_reason:normalize_then_upstream",
            "AROUND",
        ),
    ),
)
