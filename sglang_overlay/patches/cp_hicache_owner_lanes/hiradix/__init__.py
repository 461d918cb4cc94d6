"""cp-hicache-owner-lanes on sglang <0.5.23: ``HiRadixCache`` (removed in 0.5.23).

Modules: ``state.py`` (per-cache state, metadata derivation), ``stamping.py`` (metadata on insert, split,
``rotation_base_of``, ``cache_*_req``), ``load_back.py`` (the owner-classed load-back), ``allocation.py``
(the chain's run and its owner-classed pages), ``eviction.py`` (a plan through upstream's primitives).
"""

from sglang_overlay.core.registry import Release, Target

_HIRADIX = "sglang.srt.mem_cache.hiradix_cache"
_RADIX = "sglang.srt.mem_cache.radix_cache"

RELEASE = Release(
    "<0.5.23",
    targets=(
        Target(_HIRADIX, "HiRadixCache.load_back", f"{__name__}.load_back:load_back_hook", "AROUND"),
        Target(_HIRADIX, "HiRadixCache.insert", f"{__name__}.stamping:insert_hook", "AROUND"),
        Target(_HIRADIX, "HiRadixCache._split_node", f"{__name__}.stamping:split_node_hook", "AROUND"),
        Target(_RADIX, "RadixCache.cache_finished_req", f"{__name__}.stamping:cache_finished_req_hook", "AROUND"),
        Target(_RADIX, "RadixCache.cache_unfinished_req", f"{__name__}.stamping:cache_unfinished_req_hook",
               "AROUND"),
        Target("sglang.srt.mem_cache.base_prefix_cache", "BasePrefixCache.rotation_base_of",
               f"{__name__}.stamping:rotation_base_of_hook", "AROUND"),
    ),
)
