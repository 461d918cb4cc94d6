"""The start-up refusal (AFTER ``UnifiedRadixCache.__init__``) on upstream's real cache and allocators.

A page-interleaved cache whose tree holds a hybrid component (here Mamba: upstream's ``MambaComponent`` beside
FULL, over a real ``PageInterleavePoolAllocator``) is one the planner cannot serve: without the refusal the
patch stays inert and upstream's lane-blind gates run (one warning at the first gate); with it the cache is
refused at construction, naming the cause and what to change. The FULL-only page-interleaved cache (what
``--enable-kv-cache-sharding`` builds) and a hybrid cache over a plain paged allocator are built as upstream
builds them. The Mamba request pool is upstream's class, unconstructed: construction checks only its type.
"""

from __future__ import annotations

import pytest

from sglang_overlay.errors import OverlayError
from tests.support.hooked import around

N, PS = 4, 4  # lanes, tokens per page


@pytest.fixture(scope="module")
def startup_hook():
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.startup import refuse_unplannable_at_startup
    from tests.support.runtime import publish_cpu_runtime

    publish_cpu_runtime()  # MambaComponent reads the published runtime context

    def after(original, self, *args, **kwargs):  # SGLang's AFTER: hook(result, self, *args, **kwargs)
        return refuse_unplannable_at_startup(original(self, *args, **kwargs), self, *args, **kwargs)

    with around(UnifiedRadixCache, "__init__", after, "cp-hicache-owner-lanes"):
        yield


def build(allocator: str, *components: str):
    import torch
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    if allocator == "interleaved":
        alloc = PageInterleavePoolAllocator(6 * PS, PS, N, torch.int64, "cpu", None, False)
    else:
        alloc = PagedTokenToKVPoolAllocator(6 * PS * N, PS, torch.int64, "cpu", None, False)
    return UnifiedRadixCache(CacheInitParams(disable=False,
        req_to_token_pool=HybridReqToTokenPool.__new__(HybridReqToTokenPool), token_to_kv_pool_allocator=alloc,
        page_size=PS, eviction_policy="lru", tree_components=tuple(ComponentType[c] for c in components),
        tree_core_backend="python", enable_mamba_extra_buffer=True))  # fmt: skip


def test_a_page_interleaved_cache_with_a_mamba_pool_is_refused_at_construction(startup_hook):
    with pytest.raises(OverlayError) as refused:
        build("interleaved", "FULL", "MAMBA")
    assert str(refused.value) == (
        "patch 'cp-hicache-owner-lanes' cannot plan owner-lane eviction on this page-interleaved UnifiedRadixCache: "
        "tree components ['FULL', 'MAMBA']: only FULL is planned per lane, not the hybrid (Mamba / SWA) device and "
        "host pools. Serve this model without KV cache sharding (--enable-kv-cache-sharding) or disable the patch "
        "(SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes); with the patch disabled upstream's lane-blind load-back, "
        "capacity and host-backup gates apply."
    )


def test_the_full_only_interleaved_cache_and_a_hybrid_cache_over_a_plain_allocator_are_built(startup_hook):
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of

    full_only = build("interleaved", "FULL")
    assert state_of(full_only) is not None  # the patch acts on it
    hybrid = build("paged", "FULL", "MAMBA")
    assert state_of(hybrid) is None  # nothing to do: not page-interleaved
