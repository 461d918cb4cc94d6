"""Shared runs of the capacity-eviction tests on sglang 0.5.23: one scenario built twice, evicted once through
upstream's original ``evict_to_free_tokens`` and once through the hook, and the trees they are built on.

Invariant: both copies are built by the same function with the same seed, so any difference in the outcomes
is the hook's; upstream's side calls the original function (``__wrapped__``), bypassing any class-level hook.
Cost: two CPU harness builds per run; ``busy`` inserts up to 30 chains (about a second).
"""

from __future__ import annotations

from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness


def allocator_base_class():
    from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator

    return BaseTokenToKVPoolAllocator


def upstream_evict(h, num_tokens):
    """Upstream's own ``evict_to_free_tokens`` on ``h``, bypassing any hook."""
    fn = allocator_base_class().__dict__["evict_to_free_tokens"]
    return getattr(fn, "__wrapped__", fn)(h.alloc, h.cache, num_tokens)


def outcome(h, num_tokens, evicted):
    free = h.alloc.class_free_page_counts() if h.interleaved else [h.alloc.available_size() // h.ps]
    return {
        "admitted": h.alloc.available_size() >= num_tokens,
        "evicted": evicted,
        "free": free,
        "evictable": h.cache.full_evictable_size(),
    }


def run_both(build, num_tokens, call=None):
    """``build`` twice; evict for ``num_tokens`` through upstream and through the hook. Returns
    (upstream's outcome, the hook's outcome, the hooked harness)."""
    call = call or (lambda h: h.alloc.evict_to_free_tokens(h.cache, num_tokens))
    results = []
    for through_hook in (False, True):
        h = build()
        before = h.evicted_tokens
        if through_hook:
            call(h)
        else:
            upstream_evict(h, num_tokens)
        results.append(outcome(h, num_tokens, h.evicted_tokens - before))
    return results[0], results[1], h


def lane0_newest(write_policy="write_through", ps=4):
    """Seven one-page leaves: lanes 1, 2, 3 twice (least recently used), then lane 0; lane 0 drained."""
    h = Harness(write_policy=write_policy, ps=ps)
    for lane in (1, 2, 3, 1, 2, 3, 0):
        h.chain(lane, 1)
    h.hold(0, h.alloc.class_free_page_counts()[0])
    assert h.alloc.class_free_page_counts()[0] == 0 and h.cache.full_evictable_size() == 7 * ps
    return h


def busy(rng, short, leaves=30):
    """Random one- and two-page chains, some extending earlier ones; lanes in ``short`` drained."""
    h = Harness(n=4, ps=4, pages_per_rank=16)
    h.random_chains(rng, leaves)
    for lane in short:
        h.hold(lane, h.alloc.class_free_page_counts()[lane])
    return h
