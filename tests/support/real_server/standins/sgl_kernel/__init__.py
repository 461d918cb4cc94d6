"""STAND-IN for the ``sgl_kernel`` package (test tooling only; never installed for a GPU user).

SGLang with ``SGLANG_USE_CPU_ENGINE=1`` imports a few names from ``sgl_kernel`` at module level. The
registry has no CPU build (the ``sglang-kernel`` wheel is CUDA-only and fails to import without
``libcuda.so.1``), so the real-server tier puts this pure-torch package first on the server's
``PYTHONPATH``.

- ``assign_req_to_token_pool_cpu`` is the one function called while serving, and it does the real work
  with the kernel's semantics (below).
- Every other name only exists so that the import succeeds; calling it raises ``NotImplementedError``
  naming the stand-in, so a path this tier does not support fails loudly instead of computing nonsense.
- ``torch.ops.sgl_kernel`` stays empty: SGLang's AMX probe is then false and every layer takes its
  native torch path.
- On a CUDA host (the GPU check's device only) every other name is there too, import-only (below).

Cost: one Python loop over the batch per call (batch <= --max-running-requests).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

import torch  # upstream's sgl_kernel imports torch first; so does the stand-in

__version__ = "0.0.0+cpu-standin"
STANDIN = True


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    """Write each request's slice of ``out_cache_loc`` into ``req_to_token[row, start:end]``.

    ``out_cache_loc`` holds the new slots of all requests back to back, in batch order.
    """
    del pool_len  # the kernel's bound check; slicing below is bounded by the tensor itself
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    pos = 0
    for row, start, end in zip(rows, starts, ends):
        n = end - start
        if n > 0:
            req_to_token[row, start:end] = out_cache_loc[pos : pos + n].to(req_to_token.dtype)
        pos += n


def _missing(name: str):
    def stub(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name}: not provided by the test stand-in (tests/support/real_server/standins/sgl_kernel)"
        )

    stub.__name__ = name
    return stub


# Imported at module level by SGLang's CPU paths, never called while this tier serves.
# (module-level ``from sgl_kernel import`` under an ``_is_cpu`` branch: on 0.5.23 in ``sglang/kernels/ops/``'s
# kvcache and speculative modules; ``sgl_kernel.mamba`` is left out: only linear-attention models import it).
IMPORT_ONLY = (
    "copy_all_layer_kv_cache_cpu",
    "rotate_input_ids_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
)
globals().update({_name: _missing(_name) for _name in IMPORT_ONLY})

# On a CUDA host (the GPU check's device, where scripts/gpu_check.sh puts this stand-in on the path) SGLang's CUDA
# branches import many more kernels, at module level and inside functions, with no fallback. There every name
# asked of the package, and of the submodules below, exists import-only: the check's modules import, and a kernel
# its path calls fails loudly, by name. ``scalar_type`` and ``allreduce`` stay absent: upstream has a fallback for
# each (a mock scalar-type table; no custom all-reduce), which touches no kernel. On a host without CUDA none of
# this exists, so upstream's CPU paths, and any ``except ImportError`` fallback, see what they always saw.
# scripts/gpu_carry.py imports the check's whole sglang closure as a CUDA host would, with this stand-in, on every
# carry build (CI's rehearsal included): a name or submodule missing here fails there, before device time.
ON_CUDA = torch.cuda.is_available() and torch.version.cuda is not None
CUDA_SUBMODULES = ("flash_attn", "kvcacheio", "mamba", "quantization", "speculative", "utils")


class _ImportOnlyModule(types.ModuleType):
    """A submodule whose every public name is an import-only stub (CUDA hosts only)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _missing(f"{self.__name__.partition('.')[2]}.{name}")


class _CudaSubmodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[::2] in {("sgl_kernel", sub) for sub in CUDA_SUBMODULES}:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return _ImportOnlyModule(spec.name, "STAND-IN: import-only on a CUDA host (tests/support/real_server)")

    def exec_module(self, module) -> None:
        pass


if ON_CUDA:
    sys.meta_path.insert(0, _CudaSubmodules())

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _missing(name)


__all__ = ["assign_req_to_token_pool_cpu", *IMPORT_ONLY]
