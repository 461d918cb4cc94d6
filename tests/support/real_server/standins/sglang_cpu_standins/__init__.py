"""STAND-INS (test-only SGLang general plugin ``cpu_standins``): HiCache's two CUDA-only pieces, on the CPU.

SGLang 0.5.23 cannot run ``--enable-hierarchical-cache`` on a CPU-only machine for two reasons, both
outside what the overlay patches:

1. the host pool registers its memory with the CUDA driver (``pool_host/common.py``
   ``alloc_with_host_register`` -> ``_cuda_host_register`` -> ``torch.cuda.cudart()``), and no server
   argument turns the pinning off;
2. the ``direct`` io backend copies through ``sgl_kernel.transfer_kv_direct`` (``pool_host/mha.py``), which
   SGLang imports only on CUDA/ROCm, so on the CPU the name does not exist in ``pool_host.mha``.

``load()`` (run by SGLang's ``load_plugins()`` in every process it is called in, before the scheduler builds
its caches) puts in place:

- ``ALLOC_MEMORY_FUNCS["cpu"]``: upstream's host allocator with no registration (a plain, unpinned host
  tensor);
- ``pool_host.mha.transfer_kv_direct``: a per-page copy with the kernel's semantics (below).

Everything else (the radix tree, HiCacheController, the host pool's layout and index bookkeeping) is
upstream's own code. The plugin is found through ``sglang_cpu_standins-0.1.dist-info/entry_points.txt``
on ``PYTHONPATH``: ``SGLANG_PLUGINS=cpu_standins`` gives pure upstream, ``cpu_standins,sglang_overlay`` the
overlay, so both runs carry the same stand-ins. ``STATS`` counts copies (pages, calls) per process.
Cost: one slice copy per page and layer (pages are ``--page-size`` tokens).
Opt-in, ``SGLANG_CPU_STANDINS_PAGE_INTERLEAVE=N``: upstream's page-interleaved allocator and host pool on one
rank (``page_interleave.py``, a further stand-in with its own limits).
"""

from __future__ import annotations

import logging

STATS = {"transfer_calls": 0, "pages_copied": 0, "host_buffers": 0}
logger = logging.getLogger(__name__)


def alloc_unpinned(dims, dtype, device, pin_memory, allocator, registration_granularity_bytes=None):
    """Upstream's ``alloc_with_host_register`` without the CUDA host registration."""
    del pin_memory, registration_granularity_bytes  # nothing to register with: there is no driver
    STATS["host_buffers"] += 1
    return allocator.allocate(dims, dtype=dtype, device=device)


def _page_starts(indices, page_size: int):
    """First index of each page; the kernel requires page-aligned, page-contiguous index runs."""
    import torch

    idx = indices.to("cpu", torch.int64)
    if idx.numel() % page_size:
        raise ValueError(
            f"transfer_kv_direct stand-in: {idx.numel()} indices is not a whole number of {page_size}-token pages"
        )
    pages = idx.view(-1, page_size)
    starts = pages[:, 0]
    if page_size > 1:
        expected = starts.unsqueeze(1) + torch.arange(page_size)
        if not torch.equal(pages, expected) or bool((starts % page_size).any()):
            raise ValueError("transfer_kv_direct stand-in: indices are not page-aligned contiguous runs")
    return starts.tolist()


def transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size: int) -> None:
    """``dst_layers[l][dst_page] = src_layers[l][src_page]`` for every layer and page, in order."""
    if len(src_layers) != len(dst_layers):
        raise ValueError(
            f"transfer_kv_direct stand-in: {len(src_layers)} source vs {len(dst_layers)} destination layers"
        )
    src_starts = _page_starts(src_indices, page_size)
    dst_starts = _page_starts(dst_indices, page_size)
    if len(src_starts) != len(dst_starts):
        raise ValueError("transfer_kv_direct stand-in: source and destination page counts differ")
    for src, dst in zip(src_layers, dst_layers):
        for s, d in zip(src_starts, dst_starts):
            dst[d : d + page_size].copy_(src[s : s + page_size])
    STATS["transfer_calls"] += 1
    STATS["pages_copied"] += len(src_starts) * len(src_layers)
    if STATS["transfer_calls"] == 1:  # once per process: the test tier checks the stand-in really ran
        logger.info(
            "sglang-cpu-standins: first transfer_kv_direct call (%d pages x %d layers)",
            len(src_starts),
            len(src_layers),
        )


def load() -> None:
    from sglang.srt.mem_cache.pool_host import common, mha

    common.ALLOC_MEMORY_FUNCS["cpu"] = alloc_unpinned
    mha.transfer_kv_direct = transfer_kv_direct
    logger.info("sglang-cpu-standins: unpinned host pool + per-page transfer_kv_direct stand-ins active")
    from sglang_cpu_standins import page_interleave

    n = page_interleave.shard_size()
    if n:  # opt-in only (SGLANG_CPU_STANDINS_PAGE_INTERLEAVE=N)
        page_interleave.install(n)
