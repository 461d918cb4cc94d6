"""The CPU stand-ins and process-wide setup under the unified release's HiCache harness (``hicache_cpu.py``).

Everything here stands in for what needs a GPU (each small and named STAND-IN below):

- :class:`CpuPageInterleaveMHAPool`: ``PageInterleaveKVPoolMixin + MHATokenToKVPool`` with
  ``placement`` set but without ``_init_page_shard_state`` (which builds a
  ``PyNcclCommunicator`` and gather scratch). Only its class (the host pool gets wrapped)
  and ``placement`` matter to the cache.
- the host pool is built with ``pin_memory=False`` (the default calls ``cudaHostRegister``).
- :func:`cpu_transfer_kv_direct` replaces ``pool_host.mha.transfer_kv_direct`` (an
  ``sgl_kernel`` op, not importable without CUDA): per-layer index copies of K and V.

plus the published ``ServerArgs`` (one per write policy and page size) and a one-rank gloo group.

Invariant: installed once per process (idempotent); the transfer engine, its submission/ack flow and the
striping stay upstream's. Cost: the first call imports upstream's memory-cache modules and builds a tiny
model's ``ServerArgs``; later calls are dictionary lookups.
"""

from __future__ import annotations

import functools
import os
import tempfile

import torch

from tests.support.runtime import tiny_model_dir

_INSTALLED: dict = {}


def publish_server_args(write_policy: str, ps: int):
    """The ``ServerArgs`` for ``write_policy`` and page size ``ps``, published as the scheduler's (built once)."""
    key = (write_policy, ps)
    if key not in _INSTALLED:
        from sglang.srt.runtime_context import publish
        from sglang.srt.server_args import ServerArgs

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model = _INSTALLED.setdefault("model", str(tiny_model_dir()))
        args = ServerArgs(
            model_path=model,
            device="cpu",
            skip_tokenizer_init=True,
            page_size=ps,
            enable_hierarchical_cache=True,
            hicache_ratio=2.0,
            hicache_write_policy=write_policy,
            hicache_io_backend="direct",
            hicache_mem_layout="layer_first",
        )
        _INSTALLED[key] = args
    if _INSTALLED.get("published") != key:
        from sglang.srt.runtime_context import publish

        # The cache and its controller read the HiCache policy from the published context,
        # not from the ServerArgs handed to init_hicache: publish the one being built
        # (re-publish is last-publish-wins upstream).
        publish(_INSTALLED[key], role="scheduler")
        _INSTALLED["published"] = key
    return _INSTALLED[key]


def cpu_transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size):
    """STAND-IN for sgl_kernel ``transfer_kv_direct``: row copies, every layer (K and V lists)."""
    for src, dst in zip(src_layers, dst_layers):
        dst[dst_indices.to(dst.device)] = src[src_indices.to(src.device)].to(dst.device)


def install_cpu_stand_ins() -> None:
    """Install the two module-level stand-ins (idempotent, for the process)."""
    if "stand_ins" in _INSTALLED:
        return
    import sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler as hpa
    import sglang.srt.mem_cache.pool_host.mha as host_mha

    real_host_cls = hpa.get_mha_host_pool_cls
    hpa.get_mha_host_pool_cls = lambda info: functools.partial(real_host_cls(info), pin_memory=False)  # STAND-IN
    host_mha.transfer_kv_direct = cpu_transfer_kv_direct  # STAND-IN
    _INSTALLED["stand_ins"] = True


def pool_classes():
    """(upstream's plain ``MHATokenToKVPool``, the page-interleaved STAND-IN class)."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.page_interleave import PageInterleavePlacement
    from sglang.srt.mem_cache.page_interleave_pool import PageInterleaveKVPoolMixin

    if "pool_cls" not in _INSTALLED:

        class CpuPageInterleaveMHAPool(PageInterleaveKVPoolMixin, MHATokenToKVPool):
            """STAND-IN for PageInterleaveMHATokenToKVPool: same bases and placement; no NCCL comm / scratch."""

            def __init__(self, *a, shard_spec, **kw):
                MHATokenToKVPool.__init__(self, *a, **kw)
                self.shard_spec = shard_spec
                self.placement = PageInterleavePlacement(shard_spec)
                self.shard_rank, self.shard_size = shard_spec.shard_rank, shard_spec.shard_size

        _INSTALLED["pool_cls"] = CpuPageInterleaveMHAPool
    return MHATokenToKVPool, _INSTALLED["pool_cls"]


def gloo_group():
    """A one-rank gloo process group (the cache's ``tp_cache_group``), initialised once."""
    if not torch.distributed.is_initialized():
        path = os.path.join(tempfile.mkdtemp(prefix="hicache-0523-pg-"), "store")
        torch.distributed.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    return torch.distributed.group.WORLD
