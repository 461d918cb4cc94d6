"""Declaration of patch cp-hicache-owner-lanes (description: patches/cp-hicache-owner-lanes.md)."""

from sglang_overlay.registry import Patch, Target

_HIRADIX = "sglang.srt.mem_cache.hiradix_cache"
_RADIX = "sglang.srt.mem_cache.radix_cache"
_HOOKS = "sglang_overlay.hicache.hooks"

PATCH = Patch(
    id="cp-hicache-owner-lanes",
    title="HiCache load-back under page-owner KV residency, owner-lane eviction planned from CPU metadata",
    description="cp-hicache-owner-lanes.md",
    role="scheduler",
    targets=(
        Target(_HIRADIX, "HiRadixCache.load_back", "sglang_overlay.hicache.load_back:load_back_hook", "AROUND"),
        Target(_HIRADIX, "HiRadixCache.insert", f"{_HOOKS}:insert_hook", "AROUND"),
        Target(_HIRADIX, "HiRadixCache._split_node", f"{_HOOKS}:split_node_hook", "AROUND"),
        Target(_RADIX, "RadixCache.cache_finished_req", f"{_HOOKS}:cache_finished_req_hook", "AROUND"),
        Target(_RADIX, "RadixCache.cache_unfinished_req", f"{_HOOKS}:cache_unfinished_req_hook", "AROUND"),
        Target(
            "sglang.srt.mem_cache.base_prefix_cache",
            "BasePrefixCache.rotation_base_of",
            f"{_HOOKS}:rotation_base_of_hook",
            "AROUND",
        ),
    ),
    drop_when=(
        "Upstream HiCache (or UnifiedRadixCache's host tier) keeps per-node owner metadata under "
        "PageInterleavePoolAllocator and loads back through owner-classed allocation with "
        "owner-lane eviction."
    ),
)
