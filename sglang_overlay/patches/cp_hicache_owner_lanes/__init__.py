"""Patch cp-hicache-owner-lanes: HiCache load-back under page-owner KV residency.

This folder owns the patch: the declaration below, its settings (``settings.py``) and its
implementation (``hooks.py``: metadata stamping on insert/split/cache_*_req; ``load_back.py``:
the load-back hook; ``planner.py``: owner-lane eviction planning; ``metadata.py``, ``state.py``,
``counters.py``; ``v0_5_23.py``: the sglang 0.5.23 load-back hook over the same planner; ``v0_5_23_capacity.py``:
its prefill/decode capacity eviction per owner lane; ``v0_5_23_host_backup.py``: its host-backup gate per lane).
Description and exit condition: ``patches/cp-hicache-owner-lanes.md``.
"""

from sglang_overlay.core.registry import Patch, Target
from sglang_overlay.patches.cp_hicache_owner_lanes.settings import SLOW_PLAN_MS

_HIRADIX = "sglang.srt.mem_cache.hiradix_cache"
_RADIX = "sglang.srt.mem_cache.radix_cache"
_PKG = "sglang_overlay.patches.cp_hicache_owner_lanes"
_HOOKS = f"{_PKG}.hooks"
_V20 = "<0.5.23"  # HiRadixCache and RadixCache's hooks: 0.5.23 removed hiradix_cache.py

PATCH = Patch(
    id="cp-hicache-owner-lanes",
    position=1,
    title="HiCache load-back under page-owner KV residency, owner-lane eviction planned from CPU metadata",
    description="cp-hicache-owner-lanes.md",
    role="scheduler",
    targets=(
        Target(_HIRADIX, "HiRadixCache.load_back", f"{_PKG}.load_back:load_back_hook", "AROUND", upstream=_V20),
        Target(_HIRADIX, "HiRadixCache.insert", f"{_HOOKS}:insert_hook", "AROUND", upstream=_V20),
        Target(_HIRADIX, "HiRadixCache._split_node", f"{_HOOKS}:split_node_hook", "AROUND", upstream=_V20),
        Target(_RADIX, "RadixCache.cache_finished_req", f"{_HOOKS}:cache_finished_req_hook", "AROUND", upstream=_V20),
        Target(_RADIX, "RadixCache.cache_unfinished_req", f"{_HOOKS}:cache_unfinished_req_hook", "AROUND", upstream=_V20),
        Target(
            "sglang.srt.mem_cache.base_prefix_cache",
            "BasePrefixCache.rotation_base_of",
            f"{_HOOKS}:rotation_base_of_hook",
            "AROUND",
            upstream=_V20,
        ),
        # 0.5.23: upstream keeps the rotation bases (no metadata hooks); the plan replaces the load-back gate
        Target("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache._load_back_transfers",
               f"{_PKG}.v0_5_23:load_back_transfers_hook", "AROUND", upstream=">=0.5.23"),
        # 0.5.23: prefill/decode capacity eviction (the min-lane floor) filled per owner lane
        Target("sglang.srt.mem_cache.allocator.base", "BaseTokenToKVPoolAllocator.evict_to_free_tokens",
               f"{_PKG}.v0_5_23_capacity:evict_to_free_tokens_hook", "AROUND", upstream=">=0.5.23"),
        # 0.5.23: the host-backup gate (the min-lane host floor) asks the lanes the backup draws from
        Target("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache._execute_kv_backup",
               f"{_PKG}.v0_5_23_host_backup:execute_kv_backup_hook", "AROUND", upstream=">=0.5.23"),
    ),
    knobs=(SLOW_PLAN_MS,),
)
