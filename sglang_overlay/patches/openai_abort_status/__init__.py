"""Patch openai-abort-status: int-like abort status codes become proper errors.

This folder owns the patch: the declaration below, its settings (``settings.py``) and its
implementation (``hooks.py``: the one normalization and the hooks that apply it). On sglang
>= 0.5.23 the tokenizer-manager hook only normalizes and leaves the rest to upstream, which now
treats every 4xx/5xx as an error and releases LoRA once itself.
Description and exit condition: ``patches/openai-abort-status.md``.
"""

from sglang_overlay.core.registry import Patch, Target
from sglang_overlay.patches.openai_abort_status.settings import ABORT_HTTP_STATUS

_HOOKS = "sglang_overlay.patches.openai_abort_status.hooks"

PATCH = Patch(
    id="openai-abort-status",
    position=3,
    title="Int-like abort status codes become proper errors on the OpenAI streaming and non-streaming paths",
    description="openai-abort-status.md",
    role="http",
    targets=(
        Target(
            "sglang.srt.managers.tokenizer_manager",
            "TokenizerManager._handle_abort_finish_reason",
            f"{_HOOKS}:handle_abort_finish_reason",
            "AROUND",
            upstream="<0.5.23",
        ),
        Target(
            "sglang.srt.managers.tokenizer_manager",
            "TokenizerManager._handle_abort_finish_reason",
            f"{_HOOKS}:normalize_then_upstream",
            "AROUND",
            upstream=">=0.5.23",
        ),
        Target(
            "sglang.srt.entrypoints.openai.serving_chat",
            "OpenAIServingChat._handle_streaming_request",
            f"{_HOOKS}:streaming_response_with_http_status",
            "AROUND",
        ),
        Target(
            "sglang.srt.entrypoints.openai.serving_completions",
            "OpenAIServingCompletion._handle_streaming_request",
            f"{_HOOKS}:streaming_response_with_http_status",
            "AROUND",
        ),
    ),
    knobs=(ABORT_HTTP_STATUS,),
)
