"""Shared fixtures of cp-hicache-owner-lanes' tests on sglang 0.5.23: the load-back gate and the capacity hook,
each installed on upstream's class the way SGLang's HookRegistry installs an AROUND hook
(``hook(original, self, *args, **kwargs)``) for the modules that ask for it.

Invariant: nothing is autouse here (a module that asks for no hook, the probe's, runs on upstream as it is);
with ``SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes`` neither hook is installed, which is how the
failing-first evidence is produced. Cost: one import of upstream's cache or allocator module per hook.
"""

from __future__ import annotations

import pytest

from tests.patches.cp_hicache_owner_lanes.unified.capacity_runs import allocator_base_class
from tests.support.hooked import around


@pytest.fixture(scope="module")
def gate_hook():
    """The load-back hook on ``UnifiedRadixCache._load_back_transfers``, for the requesting module."""
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.gate import load_back_transfers_hook

    with around(UnifiedRadixCache, "_load_back_transfers", load_back_transfers_hook, "cp-hicache-owner-lanes"):
        yield


@pytest.fixture(scope="module")
def capacity_hook():
    """The capacity hook on ``BaseTokenToKVPoolAllocator.evict_to_free_tokens``, for the requesting module."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified import capacity as cap

    with around(
        allocator_base_class(), "evict_to_free_tokens", cap.evict_to_free_tokens_hook, "cp-hicache-owner-lanes"
    ):
        yield
