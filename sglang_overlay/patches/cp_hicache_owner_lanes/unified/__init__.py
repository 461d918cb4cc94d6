"""cp-hicache-owner-lanes on sglang >=0.5.23: ``UnifiedRadixCache`` (upstream keeps the rotation bases).

Modules: ``state.py`` (per-cache state, leaf index), ``tree_view.py`` (the tree in the planner's terms),
``planning.py`` (need per lane, plans), ``eviction.py`` (a plan through upstream's primitives), and one
module per hook: ``gate.py`` (load-back admission), ``capacity.py`` (prefill/decode eviction),
``host_backup.py`` (the host-backup gate). Shared upstream types: ``upstream.py``.
"""

from sglang_overlay.core.registry import Release, Target

_UNIFIED = "sglang.srt.mem_cache.unified_radix_cache"

RELEASE = Release(
    ">=0.5.23",
    targets=(
        # upstream keeps the rotation bases (no metadata hooks); the plan replaces the load-back gate
        Target(_UNIFIED, "UnifiedRadixCache._load_back_transfers", f"{__name__}.gate:load_back_transfers_hook",
               "AROUND"),
        # prefill/decode capacity eviction (the min-lane floor) filled per owner lane
        Target("sglang.srt.mem_cache.allocator.base", "BaseTokenToKVPoolAllocator.evict_to_free_tokens",
               f"{__name__}.capacity:evict_to_free_tokens_hook", "AROUND"),
        # the host-backup gate (the min-lane host floor) asks the lanes the backup draws from
        Target(_UNIFIED, "UnifiedRadixCache._execute_kv_backup", f"{__name__}.host_backup:execute_kv_backup_hook",
               "AROUND"),
    ),
)
