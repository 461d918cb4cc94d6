"""STAND-IN (test-only, opt-in): upstream's page-interleaved KV allocator and host pool on one CPU rank.

Upstream 0.5.23 builds ``PageInterleavePoolAllocator`` only for ``--enable-kv-cache-sharding`` on PD prefill
workers (CUDA-only attention backends, mooncake/nixl, several ranks), none of which a CPU runs. With
``SGLANG_CPU_STANDINS_PAGE_INTERLEAVE=N`` (N >= 2; unset: nothing here is installed) three upstream
construction functions are overridden, so a real one-rank CPU server builds upstream's own classes:

- ``KVCacheConfigurator._resolve_kv_shard``: after the original, ``kv_shard_size = N`` (rank stays None), so
  the allocator branch builds ``PageInterleavePoolAllocator`` (N owner classes over N x ``--max-total-tokens``
  logical slots) and the pool builders stay stock;
- ``KVCacheConfigurator._build_mha_kv_pool``: the stock ``MHATokenToKVPool`` gets ``N*S + (N-1)*page`` rows,
  the allocator's highest logical loc + 1, so K/V live at their logical locs (nothing else translates them);
- ``hybrid_pool_assembler.build_kv_host_pool``: the stock host pool wrapped in upstream's
  ``PageInterleaveHostPool`` with an identity placement (every page local, local row = logical slot) and its
  class slots sized to the rows (``rows // N - page``), so backups and load-backs keep each page's class.

Not exercised (say so wherever results are reported): striping across ranks, the PyNccl prefix gather,
scratch admission (no shard spec), the disaggregation send filter; no decode (the allocator refuses
``alloc``/``alloc_decode``): requests are ``max_tokens=1``, a prefill worker's job.
The host-memory reserve (``pool_host.base.HICACHE_HOST_MEMORY_RESERVE_BYTES``, 10 GiB) drops to 256 MiB: the
host pools here are kilobytes, and a loaded CI host refused to start them. Each override's target is
fingerprinted (``FINGERPRINTS``): a changed upstream definition refuses loudly.
``Scheduler.flush_cache`` logs one ``LEDGER`` line (free pages per class of the allocator and host pool, and
the pages the tree holds, before and after the flush; ``UnifiedRadixCache.load_back`` calls served and refused
since start, counted the same way on both sides) so a test can check that nothing leaked.
Cost: construction only, plus one tree walk per flush.
"""

from __future__ import annotations

import json
import logging
import os

logger = logging.getLogger(__name__)

SETTING = "SGLANG_CPU_STANDINS_PAGE_INTERLEAVE"
LEDGER = "page-interleave stand-in ledger: "
_CONFIG = "sglang.srt.mem_cache.kv_cache_configurator"
_ASSEMBLER = "sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler"
# The definitions these overrides were written against (sglang 0.5.23), as sglang_overlay fingerprints them.
FINGERPRINTS = {
    (
        _CONFIG,
        "KVCacheConfigurator._resolve_kv_shard",
    ): "sha256:7f809f1df77e19fe426e8a6ac8c946032d7cf63a90e6e4710ca2aa8909389c13",
    (
        _CONFIG,
        "KVCacheConfigurator._build_mha_kv_pool",
    ): "sha256:5c7ca32ed426462720cd8991d2b645c1978ca3858324cad321d4a555b00d49b9",
    (_ASSEMBLER, "build_kv_host_pool"): "sha256:2295c6598d78d075020c77574841599ef28f8b3f7e52346d02ad9607157072ee",
    (
        "sglang.srt.mem_cache.pool_host.page_interleave",
        "PageInterleaveHostPool",
    ): "sha256:4ae68dc1f29c7ffdfb3f1dbf698cf1cc4c7b9899ca7cc85477c68ca4db04ae71",
    (
        "sglang.srt.mem_cache.unified_radix_cache",
        "UnifiedRadixCache.load_back",
    ): "sha256:6b2ce03cce62a21aa23a27f45c8623b680c28bddcebf1069d7cf04f69ba93a92",
    (
        "sglang.srt.managers.scheduler",
        "Scheduler.flush_cache",
    ): "sha256:65536b52ead78b3054d54ade92a1abfc60b77a870ae397c1dbde29f4f65a58f2",
}
LOAD_BACKS = {"served": 0, "refused": 0}  # UnifiedRadixCache.load_back outcomes in this process


class StandinDrift(RuntimeError):
    """An overridden upstream definition is not the one this stand-in was written against."""


def shard_size() -> int:
    """N from the setting; 0 when unset. Anything but an integer >= 2 is refused."""
    raw = os.environ.get(SETTING, "").strip()
    if not raw:
        return 0
    if not raw.isdigit() or int(raw) < 2:
        raise ValueError(f"{SETTING}={raw!r}: expected an integer >= 2 (owner classes), or unset")
    return int(raw)


def check_fingerprints() -> None:
    from sglang_overlay.core.fingerprint import fingerprint_installed

    drift = [
        f"{module}.{qualname}"
        for (module, qualname), expected in FINGERPRINTS.items()
        if fingerprint_installed(module, qualname) != expected
    ]
    if drift:
        raise StandinDrift(f"page-interleave stand-in: upstream changed {drift}; re-read and re-pin the overrides")


class IdentityPlacement:
    """One rank holds every class: every page is local and its local row is its logical slot."""

    def __init__(self, shard_size: int, page_size: int):
        from types import SimpleNamespace

        self.spec = SimpleNamespace(shard_rank=0, shard_size=shard_size, page_size=page_size)

    def owner_of(self, loc):
        return (loc % (self.spec.shard_size * self.spec.page_size)) // self.spec.page_size

    def local_index(self, loc):
        return loc

    def local_mask(self, loc, rank):
        del rank
        import torch

        return torch.ones_like(loc, dtype=torch.bool)

    def filter_local(self, loc, rank):
        del rank
        return loc


def install(n: int) -> None:
    check_fingerprints()
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.mem_cache import kv_cache_configurator as config
    from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler as assembler
    from sglang.srt.mem_cache.pool_host import base as host_base
    from sglang.srt.mem_cache.pool_host.page_interleave import PageInterleaveHostPool
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    cls = config.KVCacheConfigurator
    resolve, build_pool, build_host = cls._resolve_kv_shard, cls._build_mha_kv_pool, assembler.build_kv_host_pool

    def _resolve_kv_shard(self):
        resolve(self)
        if self.kv_shard_rank is None and not self.is_draft_worker:
            self.kv_shard_size = n

    def _build_mha_kv_pool(self, *, max_total_num_tokens, **kwargs):
        if self.kv_shard_size > 1 and self.kv_shard_rank is None:
            max_total_num_tokens = n * max_total_num_tokens + (n - 1) * self.page_size
        return build_pool(self, max_total_num_tokens=max_total_num_tokens, **kwargs)

    class OneRankHostPool(PageInterleaveHostPool):
        """Upstream's classed host slots over every row of one host pool (identity placement)."""

        def clear(self):
            rows = self.size
            self.size = rows // self.shard_size  # the class allocator below sizes itself from ``size``
            try:
                super().clear()
            finally:
                self.size = rows

        @property
        def logical_size(self) -> int:
            return self.host_pool.size  # one rank holds every class: the logical capacity is its rows

    def build_kv_host_pool(*, kv_pool, page_size, **kwargs):
        host_pool = build_host(kv_pool=kv_pool, page_size=page_size, **kwargs)
        if isinstance(host_pool, PageInterleaveHostPool):
            return host_pool
        return OneRankHostPool(host_pool, IdentityPlacement(n, page_size))

    flush, load_back = Scheduler.flush_cache, UnifiedRadixCache.load_back

    def counted_load_back(self, *args, **kwargs):
        ok = load_back(self, *args, **kwargs)
        LOAD_BACKS["served" if ok else "refused"] += 1
        return ok

    def flush_cache(self, *args, **kwargs):
        before = ledger(self)
        done = flush(self, *args, **kwargs)
        logger.info("%s%s", LEDGER, json.dumps({"flushed": bool(done), "before": before, "after": ledger(self)}))
        return done

    # Upstream keeps 10 GiB of the machine's free memory out of any host pool and refuses to start below it;
    # these host pools are kilobytes (tiny model), and a 2-core CI host with several test servers has less free.
    host_base.HICACHE_HOST_MEMORY_RESERVE_BYTES = min(host_base.HICACHE_HOST_MEMORY_RESERVE_BYTES, 256 << 20)
    cls._resolve_kv_shard, cls._build_mha_kv_pool = _resolve_kv_shard, _build_mha_kv_pool
    assembler.build_kv_host_pool = build_kv_host_pool
    Scheduler.flush_cache = flush_cache
    UnifiedRadixCache.load_back = counted_load_back
    logger.info("sglang-cpu-standins: page-interleave stand-in active (N=%d owner classes, one rank)", n)


def ledger(scheduler) -> dict:
    """Free pages per class (allocator, host pool) and the pages per class the tree's nodes hold."""
    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    cache = scheduler.tree_cache
    allocator = scheduler.token_to_kv_pool_allocator
    allocator = getattr(allocator, "full_attn_allocator", allocator)
    n, ps = allocator.shard_size, allocator.page_size
    host = cache.cache_controller.mem_pool_host.anchor_entry.host_pool
    held = {"device": [0] * n, "host": [0] * n}
    for node in cache.tree_core._collect_all_nodes():
        if node is cache.tree_core.root_node:
            continue
        data = node.component_data[ComponentType.FULL]
        for side, value in (("device", data.value), ("host", data.host_value)):
            if value is not None:
                for page in (value[::ps] // ps % n).tolist():
                    held[side][page] += 1
    return {
        "device_free": allocator.class_free_page_counts(),
        "host_free": host._slots.class_free_page_counts(),
        "device_held": held["device"],
        "host_held": held["host"],
        "load_backs": dict(LOAD_BACKS),
    }
