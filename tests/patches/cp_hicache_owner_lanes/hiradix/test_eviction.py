"""The planned eviction (``evict_planned``) and what it reports: tokens to upstream's metrics, lanes to Prometheus.

cp-hicache-owner-lanes on upstream's real HiRadixCache, PageInterleavePoolAllocator, HiCacheController and
host pool (CPU; only the copy engine is a stand-in). Invariant: what cannot be evicted is passed over, the
tokens returned are those evicted under either write policy (host pressure included, counted as upstream
counts them), and the per-lane counters reach prometheus_client's registry with upstream's collector labels
(the registration ``../test_counters.py`` works around). Cost: under a second.
"""

from __future__ import annotations

import pytest

from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc
from tests.patches.cp_hicache_owner_lanes.hiradix.lane_scenarios import (
    deficit_tree,
    evicted_target,
    leaf_chain,
    load,
)

pytestmark = pytest.mark.usefixtures("overlay")  # the overlay applied once per module (conftest.py)


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_evict_planned_passes_over_what_is_not_evictable_and_reports_the_tokens_it_freed(policy):
    """A locked leaf first in the list is passed over, not the end of the list; the tokens evicted are
    returned and handed to upstream's eviction metrics, once per call."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    cache = hc.build_cpu_hicache(4, 4, 8, write_policy=policy)
    locked, one, two = leaf_chain(cache, 0), leaf_chain(cache, 1), leaf_chain(cache, 2, pages=2)
    cache.inc_lock_ref(locked)
    reported = []
    cache.update_eviction_metrics = lambda num_evicted, start: reported.append(num_evicted)
    evicted = evict_planned(cache, [locked, one, two])
    hc.settle(cache)
    assert evicted == len(one.key) + len(two.key) == 3 * cache.page_size
    assert reported == [evicted]
    assert not locked.evicted and locked.parent is not None
    cache.dec_lock_ref(locked)


def test_write_back_eviction_counts_backed_up_and_newly_backed_up_leaves_alike():
    """Under write-back a leaf loaded back from host is still backed up (evicted at once), a fresh one is
    backed up first then detached: the tokens evicted are their sum, whatever the order."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    cache = hc.build_cpu_hicache(4, 4, 8, write_policy="write_back")
    cache.load_back_threshold = 0
    backed = leaf_chain(cache, 0)
    assert evict_planned(cache, [backed]) == 4
    hc.settle(cache)
    assert cache.load_back(backed) is not None
    hc.settle(cache)
    fresh_leaf = leaf_chain(cache, 1, pages=2)
    assert backed.backuped and not backed.evicted and not fresh_leaf.backuped
    assert evict_planned(cache, [fresh_leaf, backed]) == 8 + 4
    hc.settle(cache)
    assert backed.evicted and fresh_leaf.evicted and fresh_leaf.backuped


def test_write_back_under_host_pressure_drops_the_leaf_and_counts_it_as_upstream_does():
    """Every host slot held elsewhere: the backup writes nothing, so the planned leaf's subtree is dropped
    (upstream's ``_drop_subtree_no_host``) and its tokens count as evicted, as upstream's own eviction does."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned

    evicted = []
    for planned in (False, True):
        cache = hc.build_cpu_hicache(4, 4, 8, write_policy="write_back")
        host = cache.cache_controller.mem_pool_host
        assert host.alloc(host.available_size()) is not None and host.available_size() == 0
        leaf = leaf_chain(cache, 1, pages=2)
        before = cache.evictable_size()
        if planned:
            evicted.append(evict_planned(cache, [leaf]))
        else:
            cache.evict(hc.EvictParams(num_tokens=8))  # upstream: its one leaf
            evicted.append(before - cache.evictable_size())
        hc.settle(cache)
        assert leaf.evicted and not leaf.backuped and leaf.host_value is None
    assert evicted == [8, 8]


def test_counters_reach_prometheus_with_metrics_enabled():
    from prometheus_client import REGISTRY

    cache = hc.build_cpu_hicache(4, 4, 6, enable_metrics=True)
    assert cache.metrics_collector is not None
    target = evicted_target(cache, 4)
    deficit_tree(cache, short_lane=1, short_last=True)
    labels = dict(cache.metrics_collector.labels)

    def sample(name, **extra):
        return REGISTRY.get_sample_value(name, {**labels, **extra}) or 0.0

    before = sample("sglang:cp_owner_lane_evicted_pages_total", lane="1")
    before0 = sample("sglang:cp_owner_lane_evicted_pages_total", lane="0")
    loads = sample("sglang:cp_owner_lane_load_backs_total", outcome="loaded")
    load(cache, target)
    assert sample("sglang:cp_owner_lane_evicted_pages_total", lane="1") == before + 1
    assert sample("sglang:cp_owner_lane_evicted_pages_total", lane="0") == before0
    assert sample("sglang:cp_owner_lane_load_backs_total", outcome="loaded") == loads + 1
