"""Declaration of patch openai-abort-status (description: patches/openai-abort-status.md)."""

from sglang_overlay.registry import Patch, Target

_HOOKS = "sglang_overlay.abort_status"

PATCH = Patch(
    id="openai-abort-status",
    title="Int-like abort status codes become proper errors on the OpenAI streaming and non-streaming paths",
    description="openai-abort-status.md",
    role="http",
    targets=(
        Target(
            "sglang.srt.managers.tokenizer_manager",
            "TokenizerManager._handle_abort_finish_reason",
            f"{_HOOKS}:handle_abort_finish_reason",
            "AROUND",
        ),
        Target(
            "sglang.srt.entrypoints.openai.serving_chat",
            "OpenAIServingChat._generate_chat_stream",
            f"{_HOOKS}:stream_with_http_status",
            "AROUND",
        ),
        Target(
            "sglang.srt.entrypoints.openai.serving_completions",
            "OpenAIServingCompletion._generate_completion_stream",
            f"{_HOOKS}:stream_with_http_status",
            "AROUND",
        ),
    ),
    drop_when=(
        "Upstream normalizes abort status codes (ints, numpy integers, strings) to HTTPStatus where "
        "finished outputs reach the OpenAI layer, maps every error status to an HTTP error on the "
        "non-streaming path, and answers an abort that precedes the first SSE chunk with an HTTP status."
    ),
)
