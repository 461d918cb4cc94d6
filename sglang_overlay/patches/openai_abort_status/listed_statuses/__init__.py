"""openai-abort-status for sglang < 0.5.23: upstream treats only listed status codes as abort errors.

``finish_reason.py``: normalize, then every error status takes upstream's 500/503 branch (state and LoRA
released once). Story: ``patches/openai-abort-status.md``.
"""

from sglang_overlay.core.registry import Release, Target

RELEASE = Release(
    "<0.5.23",
    targets=(
        Target(
            "sglang.srt.managers.tokenizer_manager",
            "TokenizerManager._handle_abort_finish_reason",
            f"{__name__}.finish_reason:handle_abort_finish_reason",
            "AROUND",
        ),
    ),
)
