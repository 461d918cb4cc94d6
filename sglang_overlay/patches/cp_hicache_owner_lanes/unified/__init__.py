"""Serves sglang >=0.5.23 (the pin 0.5.23): release folder ``unified/`` of cp-hicache-owner-lanes.

The design it serves: ``UnifiedRadixCache`` (upstream keeps the rotation bases).

Modules: ``state.py`` (per-cache state, leaf index), ``lane_tree.py`` (the tree in the planner's terms),
``planning.py`` (need per lane, plans), ``eviction.py`` (a plan through upstream's primitives), and one
module per hook: ``gate.py`` (load-back admission), ``capacity.py`` (prefill/decode eviction),
``host_backup.py`` (the host-backup gate), ``startup.py`` (the start-up refusal of a page-interleaved
cache it cannot plan); ``shadow.py``: the one-call instance-method shadowing the gate
and the host-backup hook use. Shared upstream types: ``upstream.py``. ``probe.py``: are
upstream's three gates still lane-blind? (``check --needed``).
"""

from sglang_overlay.core.registry import Release, Target

_UNIFIED = "sglang.srt.mem_cache.unified_radix_cache"

RELEASE = Release(
    ">=0.5.23",
    probe=f"{__name__}.probe:probe",
    targets=(
        # upstream keeps the rotation bases (no metadata hooks); the plan replaces the load-back gate
        Target(
            _UNIFIED, "UnifiedRadixCache._load_back_transfers", f"{__name__}.gate:load_back_transfers_hook", "AROUND"
        ),
        # prefill/decode capacity eviction (the min-lane floor) filled per owner lane
        Target(
            "sglang.srt.mem_cache.allocator.base",
            "BaseTokenToKVPoolAllocator.evict_to_free_tokens",
            f"{__name__}.capacity:evict_to_free_tokens_hook",
            "AROUND",
        ),
        # the host-backup gate (the min-lane host floor) asks the lanes the backup draws from
        Target(
            _UNIFIED, "UnifiedRadixCache._execute_kv_backup", f"{__name__}.host_backup:execute_kv_backup_hook", "AROUND"
        ),
        # start-up: a page-interleaved cache the lanes cannot plan (hybrid pools, another tree core) is refused
        Target(_UNIFIED, "UnifiedRadixCache.__init__", f"{__name__}.startup:refuse_unplannable_at_startup", "AFTER"),
    ),
)
