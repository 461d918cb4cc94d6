"""cp-hicache-owner-lanes on sglang <0.5.23: ``HiRadixCache`` (removed in 0.5.23).

Modules: ``state.py`` (per-cache state, metadata derivation), ``stamping.py`` (metadata on insert, split,
``rotation_base_of``, ``cache_*_req``), ``load_back.py`` (the owner-classed load-back), ``allocation.py``
(the chain's run and its owner-classed pages), ``eviction.py`` (a plan through upstream's primitives);
``probe.py`` (is upstream's bug still there? ``check --needed``).
"""

from sglang_overlay.core.registry import Dependency, Release, Target

_HIRADIX = "sglang.srt.mem_cache.hiradix_cache"
_RADIX = "sglang.srt.mem_cache.radix_cache"

RELEASE = Release(
    "<0.5.23",
    probe=f"{__name__}.probe:probe",
    targets=(
        Target(_HIRADIX, "HiRadixCache.load_back", f"{__name__}.load_back:load_back_hook", "AROUND"),
        Target(_HIRADIX, "HiRadixCache.insert", f"{__name__}.stamping:insert_hook", "AROUND"),
        Target(_HIRADIX, "HiRadixCache._split_node", f"{__name__}.stamping:split_node_hook", "AROUND"),
        Target(_RADIX, "RadixCache.cache_finished_req", f"{__name__}.stamping:cache_finished_req_hook", "AROUND"),
        Target(_RADIX, "RadixCache.cache_unfinished_req", f"{__name__}.stamping:cache_unfinished_req_hook", "AROUND"),
        Target(
            "sglang.srt.mem_cache.base_prefix_cache",
            "BasePrefixCache.rotation_base_of",
            f"{__name__}.stamping:rotation_base_of_hook",
            "AROUND",
        ),
    ),
    depends=(
        Dependency("sglang.srt.disaggregation.kv_events", "BlockStored.cache_salt", "hiradix.stamping"),
        Dependency("sglang.srt.disaggregation.kv_events", "BlockStored.token_ids", "hiradix.stamping"),
        Dependency("sglang.srt.disaggregation.kv_events", "StorageMedium.GPU", "hiradix.load_back"),
        Dependency("sglang.srt.managers.cache_controller", "HiCacheController.evict_device", "hiradix.eviction"),
        Dependency(
            "sglang.srt.mem_cache.allocator.page_interleave",
            "PageInterleavePoolAllocator.alloc_extend",
            "hiradix.allocation",
        ),
        Dependency(
            "sglang.srt.mem_cache.allocator.page_interleave",
            "PageInterleavePoolAllocator.class_free_page_counts",
            "hiradix.load_back",
        ),
        Dependency(
            "sglang.srt.mem_cache.allocator.page_interleave",
            "PageInterleavePoolAllocator.least_full_class",
            "hiradix.stamping,hiradix.state",
        ),
        Dependency(
            "sglang.srt.mem_cache.base_prefix_cache",
            "BasePrefixCache.cache_controller",
            "hiradix.eviction,hiradix.load_back",
        ),
        Dependency("sglang.srt.mem_cache.base_prefix_cache", "BasePrefixCache.kv_events", "hiradix.load_back"),
        Dependency("sglang.srt.mem_cache.base_prefix_cache", "BasePrefixCache.metrics_collector", "hiradix.state"),
        Dependency(
            "sglang.srt.mem_cache.base_prefix_cache", "BasePrefixCache.update_eviction_metrics", "hiradix.eviction"
        ),
        Dependency("sglang.srt.mem_cache.base_prefix_cache", "DecLockRefResult.delta", "hiradix.load_back"),
        Dependency("sglang.srt.mem_cache.base_prefix_cache", "InsertParams.key", "hiradix.stamping,hiradix.state"),
        Dependency(
            "sglang.srt.mem_cache.base_prefix_cache",
            "InsertParams.rotation_base",
            "hiradix.allocation,hiradix.stamping",
        ),
        Dependency(
            "sglang.srt.mem_cache.base_prefix_cache",
            "InsertParams.value",
            "hiradix.eviction,hiradix.load_back,hiradix.stamping,planner",
        ),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache._detach_backuped", "hiradix.eviction"),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache._drop_subtree_no_host", "hiradix.eviction"),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache._evict_backuped", "hiradix.eviction"),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache._evict_regular", "hiradix.eviction"),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache._get_extra_pools", "hiradix.load_back"),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache.dec_lock_ref", "hiradix.load_back"),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache.inc_lock_ref", "hiradix.load_back"),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache.reset", "hiradix.stamping"),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache.write_backup", "hiradix.eviction"),
        Dependency("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache.writing_check", "hiradix.eviction"),
        Dependency("sglang.srt.mem_cache.radix_cache", "RadixKey", "hiradix.stamping"),
        Dependency("sglang.srt.mem_cache.radix_cache", "RadixKey.child_key_at", "hiradix.stamping"),
        Dependency("sglang.srt.mem_cache.radix_cache", "RadixKey.match_at", "hiradix.stamping"),
        Dependency("sglang.srt.mem_cache.radix_cache", "RadixKey.page_aligned", "hiradix.stamping"),
        Dependency("sglang.srt.mem_cache.radix_cache", "TreeNode.backuped", "hiradix.eviction,hiradix.load_back"),
        Dependency("sglang.srt.mem_cache.radix_cache", "TreeNode.evicted", "hiradix.eviction,hiradix.load_back"),
        Dependency("sglang.srt.mem_cache.radix_cache", "TreeNode.protect_host", "hiradix.eviction,hiradix.load_back"),
        Dependency("sglang.srt.mem_cache.radix_cache", "TreeNode.release_host", "hiradix.eviction,hiradix.load_back"),
    ),
)
