"""Publish SGLang's runtime context offline on the CPU (no GPU, no network).

Upstream's serving layer and caches read a published runtime context. This
writes a tiny Llama config directory (no weights) and publishes
``ServerArgs(model_path=..., device="cpu", skip_tokenizer_init=True)``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_PUBLISHED: dict = {}


def tiny_model_dir(root: str | None = None) -> Path:
    from transformers import LlamaConfig

    path = Path(root or tempfile.mkdtemp(prefix="sglang-overlay-tiny-model-"))
    LlamaConfig(
        architectures=["LlamaForCausalLM"],
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=1000,
        max_position_embeddings=4096,
    ).save_pretrained(path)
    return path


def publish_cpu_runtime(role: str = "scheduler", **server_args_overrides):
    """Publish once per process; returns the ServerArgs."""
    if "server_args" in _PUBLISHED:
        return _PUBLISHED["server_args"]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(
        model_path=str(tiny_model_dir()), device="cpu", skip_tokenizer_init=True, **server_args_overrides
    )
    publish(server_args, role=role)
    _PUBLISHED["server_args"] = server_args
    return server_args
