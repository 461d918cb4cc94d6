"""A tiny random-weight Llama-like model and its tokenizer, built offline for the real-server tier.

What it builds: a byte-level BPE tokenizer (``tokenizers``) trained on the committed GSM8K fixture
(``tests/data/gsm8k/train.jsonl``, so a clone with nothing beside it works), wrapped as a transformers fast
tokenizer with ``<|im_end|>`` as the end-of-turn token and a ChatML chat template, plus a
``LlamaForCausalLM`` (hidden 128, 2 layers, 4 heads / 2 KV heads, vocab = the tokenizer's, ~2k) with
seeded random weights, both written with ``save_pretrained``.

Invariants: the same inputs (this file's build parameters, the fixture's bytes) give the same directory
name (``tiny-model-<hash>``) and the same weights (fixed seed); a finished directory holds a
``.complete`` marker, written last, so a build interrupted half-way is rebuilt, never served.
Cost: about 10-20 s to build on 2 cores, then a directory check on each later call.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
GSM8K_TRAIN = REPO / "tests" / "data" / "gsm8k" / "train.jsonl"
DEFAULT_CACHE = Path.home() / ".cache" / "sglang-overlay"

SEED = 1234
VOCAB_SIZE = 2048
END_OF_TURN = "<|im_end|>"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", END_OF_TURN]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MODEL_CONFIG = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    torch_dtype="float32",
)


def build_key() -> str:
    """Hash of everything the built model depends on (parameters and the training text)."""
    h = hashlib.sha256()
    h.update(json.dumps([SEED, VOCAB_SIZE, SPECIAL_TOKENS, CHAT_TEMPLATE, MODEL_CONFIG], sort_keys=True).encode())
    h.update(GSM8K_TRAIN.read_bytes())
    return h.hexdigest()[:12]


def _training_text():
    with GSM8K_TRAIN.open(encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            yield record["question"]
            yield record["answer"]


def _build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=END_OF_TURN,
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def _build_model(out: Path, tokenizer) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    eos = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    config = LlamaConfig(
        architectures=["LlamaForCausalLM"],
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        **MODEL_CONFIG,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(
        eos_token_id=eos, bos_token_id=config.bos_token_id, pad_token_id=config.pad_token_id
    ).save_pretrained(out)


def build_once(target: Path, build, marker: str) -> Path:
    """``target`` built by ``build(staging)`` in a staging directory beside it, ``.complete`` (``marker``) written
    last and the whole renamed into place: a build interrupted half-way is rebuilt, never served."""
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(staging)
        (staging / ".complete").write_text(marker + "\n")
        if target.exists() and not (target / ".complete").is_file():
            shutil.rmtree(target)  # left by an interrupted build of another layout: never served
        try:
            staging.rename(target)
        except OSError:  # another process finished the same build first: theirs is identical
            if not (target / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def build_tiny_model(cache_dir: str | os.PathLike | None = None) -> Path:
    """The tiny model's directory: ``<cache_dir or ~/.cache/sglang-overlay>/tiny-model-<hash>``, built if absent."""
    root = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE

    def build(staging: Path) -> None:
        _build_model(staging, _build_tokenizer(staging))

    return build_once(root / f"tiny-model-{build_key()}", build, build_key())


if __name__ == "__main__":
    print(build_tiny_model())
