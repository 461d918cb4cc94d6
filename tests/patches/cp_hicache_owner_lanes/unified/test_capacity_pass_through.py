"""cp-hicache-owner-lanes on sglang 0.5.23: what the capacity hook leaves to upstream and what its planning
costs, on upstream's real ``PageInterleavePoolAllocator.evict_to_free_tokens``, ``UnifiedRadixCache`` and its
HiCache controller (CPU; stand-ins named in this folder's hicache_cpu_standins.py).

No short lane: nothing evicted and no tensor read; a plain paged allocator, a call without a tree cache, extra
arguments or another allocator's cache: upstream's function, called as it was. Planning on a busy tree reads no
tensor. Invariant: upstream's side is its original function (capacity_runs.py), the tensor counter that of
tests/support/hicache_tensor_count.py. Cost: a few seconds.
"""

from __future__ import annotations

import random

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.unified import capacity as cap
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import plan_lanes
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import state_of
from tests.patches.cp_hicache_owner_lanes.unified.capacity_runs import busy, lane0_newest, outcome, run_both
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.support.hicache_tensor_count import count_tensor_work


@pytest.fixture(scope="module", autouse=True)
def hook(capacity_hook):
    """The capacity hook (conftest.py's ``capacity_hook``) for every test here."""


def test_no_short_lane_evicts_nothing_and_reads_no_tensor():
    h = lane0_newest()
    h.release(0)  # one lane-0 page back: every lane has a free page
    state = state_of(h.cache)
    before = outcome(h, 16, 0)
    with count_tensor_work() as work:
        assert h.alloc.evict_to_free_tokens(h.cache, 16) is None
    assert outcome(h, 16, 0) == before and before["admitted"]
    assert work.aten_ops == [] and work.host_syncs == 0
    assert state.counters.capacity_plans == state.counters.capacity_fallbacks == 0


def test_planning_reads_no_tensor_on_a_busy_tree():
    h = busy(random.Random(5), short=(0, 2))
    state = state_of(h.cache)
    free = [0] * h.n  # every lane short by 2: a long walk
    with count_tensor_work() as work:
        plan = plan_lanes(h.cache, state, [2] * h.n, free)
    assert plan.scanned >= len(plan.leaves) >= 2
    assert work.total == 0 and work.host_syncs == 0


def test_plain_paged_allocator_keeps_upstreams_path():
    """A non-interleaved allocator (every other deployment) gets upstream's eviction unchanged."""

    def build():
        h = Harness(interleaved=False, pages_per_rank=3)
        while h.chain(None, 1)[0] is not None:
            pass
        return h

    theirs, mine, h = run_both(build, 16)
    assert mine == theirs and theirs["evicted"] > 0 and theirs["admitted"]
    assert cap._state(h.alloc, h.cache) is None and counters_of(h.cache) is None


def test_other_callers_and_arguments_pass_through():
    h = lane0_newest()
    calls = []

    def original(self, *args, **kwargs):
        calls.append((self, args, kwargs))
        return "upstream"

    assert cap.evict_to_free_tokens_hook(original, h.alloc, None, 16) == "upstream"  # no tree cache
    assert cap.evict_to_free_tokens_hook(original, h.alloc, h.cache, 16, "future") == "upstream"
    assert cap.evict_to_free_tokens_hook(original, h.alloc, h.cache, 16, future=1) == "upstream"
    other = Harness(interleaved=False)
    assert cap.evict_to_free_tokens_hook(original, h.alloc, other.cache, 16) == "upstream"  # not its allocator
    assert calls == [
        (h.alloc, (None, 16), {}),
        (h.alloc, (h.cache, 16, "future"), {}),
        (h.alloc, (h.cache, 16), {"future": 1}),
        (h.alloc, (other.cache, 16), {}),
    ]
    assert h.evicted_tokens == 0
