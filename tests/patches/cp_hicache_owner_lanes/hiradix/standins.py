"""The CPU stand-ins ``hicache_cpu.build_cpu_hicache`` puts where upstream's HiRadixCache needs a GPU or a CLI.

- ``CpuCopyTransferEngine`` (STAND-IN for ``L2TransferEngine``'s sgl_kernel copy
  kernels): really copies K and V rows, every layer, between the CPU "device"
  pool and the host pool with index_select/index_copy, using ``torch.cpu``
  events and streams as upstream's engine does on this machine.
- ``hicache_settings``: the host pool built with ``pin_memory=False`` (the default
  registers memory with the CUDA driver) and the server's HiCache settings supplied
  directly instead of through command-line plumbing.
- ``ensure_gloo_group``: the one-process group HiRadixCache all-reduces over.

Invariant: each stand-in moves or supplies exactly what upstream's would (every row of every
layer, the settings the server would pass); upstream's module attributes are restored on exit.
Cost: a row copy per layer per transfer; one process group per test process.
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
from contextlib import contextmanager
from types import SimpleNamespace

import torch
from sglang.srt.mem_cache import hiradix_cache as hiradix_mod
from sglang.srt.mem_cache.l2_transfer import L2TransferEngine, TransferCompletion


class CpuCopyTransferEngine(L2TransferEngine):
    """STAND-IN for the GPU copy kernels: synchronous CPU row copies, all layers."""

    def __init__(self, io_backend: str = "direct"):
        super().__init__(io_backend)
        self.rows_to_host = 0
        self.rows_to_device = 0

    @staticmethod
    def _event():
        ev = torch.cpu.Event()
        ev.record()
        return ev

    def submit_device_to_host(self, transfers):
        start = self._event()
        for t in transfers:
            dev = t.device_indices.to(t.device_pool.k_buffer[0].device, torch.int64)
            host = t.host_indices.to("cpu", torch.int64)
            for layer in range(t.host_pool.layer_num):
                for src, dst in (
                    (t.device_pool.k_buffer[layer], t.host_pool.k_data_refs[layer]),
                    (t.device_pool.v_buffer[layer], t.host_pool.v_data_refs[layer]),
                ):
                    dst.index_copy_(0, host, src.index_select(0, dev).to(dst.device))
            self.rows_to_host += len(dev)
        return TransferCompletion(start, self._event(), False)

    def submit_host_to_device(self, transfers, *, layer_num, start_event=None, on_layer_done=None):
        start = self._event()
        for layer in range(layer_num):
            for t in transfers:
                dev = t.device_indices.to(t.device_pool.k_buffer[layer].device, torch.int64)
                host = t.host_indices.to("cpu", torch.int64)
                for src, dst in (
                    (t.host_pool.k_data_refs[layer], t.device_pool.k_buffer[layer]),
                    (t.host_pool.v_data_refs[layer], t.device_pool.v_buffer[layer]),
                ):
                    dst.index_copy_(0, dev, src.index_select(0, host).to(dst.device))
                if layer == 0:
                    self.rows_to_device += len(dev)
            if on_layer_done is not None:
                on_layer_done(layer)
        return TransferCompletion(start, self._event(), False)


_PG_LOCK = threading.Lock()


def ensure_gloo_group():
    """A one-process gloo group (HiRadixCache all-reduces ready counts over it)."""
    with _PG_LOCK:
        if not torch.distributed.is_initialized():
            path = os.path.join(tempfile.mkdtemp(prefix="owner-lanes-pg-"), "store")
            torch.distributed.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    return torch.distributed.group.WORLD


@contextmanager
def hicache_settings(write_policy: str, host_ratio: float):
    """Supply the server's HiCache settings to upstream's __init__ (no CLI plumbing)."""
    real_get_memory = hiradix_mod.get_memory
    real_host_cls = hiradix_mod.get_mha_host_pool_cls
    base = real_get_memory()
    settings = SimpleNamespace(
        hicache_ratio=host_ratio,
        hicache_size=0,
        hicache_mem_layout="layer_first",
        hicache_write_policy=write_policy,
        hicache_io_backend="direct",
        hicache_storage_backend=None,
        hicache_storage_backend_extra_config=None,
        hicache_storage_prefetch_policy=getattr(base, "hicache_storage_prefetch_policy", "best_effort"),
    )

    def host_cls(kv):
        return functools.partial(real_host_cls(kv), pin_memory=False)

    hiradix_mod.get_memory = lambda: settings
    hiradix_mod.get_mha_host_pool_cls = host_cls
    try:
        yield
    finally:
        hiradix_mod.get_memory = real_get_memory
        hiradix_mod.get_mha_host_pool_cls = real_host_cls
