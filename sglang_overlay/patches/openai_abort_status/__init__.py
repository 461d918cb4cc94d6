"""Patch openai-abort-status: int-like abort status codes become proper errors.

Root (every release): ``status.py`` (the one normalisation), ``streaming.py`` (the OpenAI routes' streaming
entry), ``settings.py`` (its knob). Release folder (the tokenizer-manager hook): ``status_range/``
(sglang >=0.5.23). Description and exit condition: ``patches/openai-abort-status.md``.
"""

from sglang_overlay.core.registry import Patch, Target
from sglang_overlay.patches.openai_abort_status.settings import ABORT_HTTP_STATUS

_STREAMING = f"{__name__}.streaming:streaming_response_with_http_status"

PATCH = Patch(
    id="openai-abort-status",
    position=3,
    title="Int-like abort status codes become proper errors on the OpenAI streaming and non-streaming paths",
    description="openai-abort-status.md",
    process="http",
    targets=(
        Target(
            "sglang.srt.entrypoints.openai.serving_chat",
            "OpenAIServingChat._handle_streaming_request",
            _STREAMING,
            "AROUND",
        ),
        Target(
            "sglang.srt.entrypoints.openai.serving_completions",
            "OpenAIServingCompletion._handle_streaming_request",
            _STREAMING,
            "AROUND",
        ),
    ),
    knobs=(ABORT_HTTP_STATUS,),
    probe=f"{__name__}.probe:probe",
)
