"""Owner-classed load-back evicts for the short lanes only: which leaves go when one lane lacks pages.

cp-hicache-owner-lanes on upstream's real HiRadixCache, PageInterleavePoolAllocator, HiCacheController and
host pool (CPU; only the copy engine is a stand-in). Invariant: the load is served, the leaves evicted are
those of the short lanes in LRU order (locked and non-deficit leaves kept, a parent joining the walk once
its children go, a pick a later one made redundant dropped), and the reloaded rows and metadata equal the
oracle's; upstream's own load_back fails on this allocator or frees the wrong lanes. Cost: under a second.
"""

from __future__ import annotations

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.allocation import alloc_owner_classed
from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc
from tests.patches.cp_hicache_owner_lanes.hiradix.lane_scenarios import (
    assert_reloaded,
    deficit_tree,
    evicted_target,
    fill_lane_locked,
    free_counts,
    fresh,
    leaf_chain,
    load,
)

pytestmark = pytest.mark.usefixtures("overlay")  # the overlay applied once per module (conftest.py)


@pytest.mark.parametrize("need_sort", [False, True])
@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_lane_deficit_patch_evicts_only_short_lane(policy, need_sort):
    cache = hc.build_cpu_hicache(4, 4, 6, write_policy=policy, need_sort=need_sort)
    cache.token_to_kv_pool_allocator.debug_mode = True  # upstream's own congruence/uniqueness checks
    target = evicted_target(cache, 4)  # one page in every lane
    short = 2
    leaves = deficit_tree(cache, short, short_last=True)
    free = free_counts(cache)
    assert free[short] == 0 and sum(free) >= 4  # aggregate is enough, one class empty
    resident_before = {c: [x for x in ls if not x.evicted] for c, ls in leaves.items()}

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert_reloaded(cache, target)
    evicted = [x for ls in leaves.values() for x in ls if x.evicted or x.parent is None]
    assert evicted == [resident_before[short][0]]  # the oldest leaf of the short lane, only
    c = counters_of(cache)
    assert c.load_backs == 1 and c.leaves_evicted == 1
    assert c.pages_evicted_per_lane == [0, 0, 1, 0]
    cache.token_to_kv_pool_allocator.debug_check_classes()


def test_lane_deficit_upstream_fails_or_over_evicts():
    """Upstream's load_back cannot allocate on this allocator at all; its fallback
    (evict(num_tokens) by LRU) frees the wrong lanes."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams
    from sglang.srt.mem_cache.hiradix_cache import HiRadixCache

    upstream_load_back = HiRadixCache.load_back.__wrapped__
    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    deficit_tree(cache, short_lane=2, short_last=True)
    node = cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(target))).best_match_node
    with pytest.raises(NotImplementedError):
        upstream_load_back(cache, node)
    # Upstream's own cleanup never ran: the raise left the host protection and
    # the ancestor lock behind (shown, then undone for the rest of the check).
    assert node.host_ref_counter == 1
    node.release_host()
    cache.dec_lock_ref(cache.root_node)

    # The fallback upstream would take: evict(len(host_indices)) by LRU.
    before = free_counts(cache)
    cache.evict(EvictParams(num_tokens=len(target)))
    hc.settle(cache)
    after = free_counts(cache)
    assert after[2] == before[2] == 0  # the short lane is still empty
    assert sum(after) - sum(before) >= 4  # while other lanes were freed
    assert alloc_owner_classed(cache.token_to_kv_pool_allocator, [md.get(node)]) is None


def test_locked_and_non_deficit_leaves_skipped():
    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)
    leaves = deficit_tree(cache, short_lane=1)
    oldest, second = leaves[1][0], leaves[1][1]
    cache.inc_lock_ref(oldest)
    others = [x for c, ls in leaves.items() if c != 1 for x in ls]

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert not oldest.evicted and oldest.parent is not None  # locked: kept
    assert second.evicted or second.parent is None  # next in LRU order of the short lane
    assert all(not x.evicted and x.parent is not None for x in others)  # non-deficit lanes kept
    assert counters_of(cache).leaves_scanned >= 2
    cache.dec_lock_ref(oldest)
    assert_reloaded(cache, target)


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_parent_that_becomes_a_leaf_joins_the_walk(policy):
    """Lane 0 can only be covered by evicting a leaf and then its parent."""
    cache = hc.build_cpu_hicache(4, 4, 4, write_policy=policy)
    target = evicted_target(cache, 8)  # two pages in every lane
    prompt = fresh(4 * 4)  # lanes 0,1,2,3
    hc.prefill(cache, prompt)
    leaf_toks = prompt + fresh(4)  # position-page 4: lane 0
    hc.prefill(cache, leaf_toks)
    parent, leaf = [x for x, _ in hc.path_nodes(cache, leaf_toks)]
    locked = [leaf_chain(cache, 0), leaf_chain(cache, 0)]
    for x in locked:
        cache.inc_lock_ref(x)
    fillers = deficit_tree(cache, short_lane=0, spare=0)
    assert free_counts(cache) == [0, 0, 0, 0]

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert leaf.evicted or leaf.parent is None
    assert parent.evicted
    assert all(not x.evicted for x in locked)
    assert sum(x.evicted or x.parent is None for ls in fillers.values() for x in ls) == 3
    assert counters_of(cache).pages_evicted_per_lane == [2, 2, 2, 2]
    for x in locked:
        cache.dec_lock_ref(x)
    assert_reloaded(cache, target)


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_chain_through_a_child_that_frees_only_another_lane(policy):
    """The only lane-0 page that can go sits in an interior node whose one child frees
    only lane 1: the load-back evicts the child, then the parent (it was refused before)."""
    cache = hc.build_cpu_hicache(4, 4, 6, write_policy=policy)
    cache.token_to_kv_pool_allocator.debug_mode = True
    target = evicted_target(cache, 4)  # one page in every lane
    parent = leaf_chain(cache, 0)  # lane 0
    parent_toks = list(parent.key.token_ids)
    child_toks = parent_toks + fresh(4)
    hc.prefill(cache, child_toks)  # position-page 1: lane 1
    child = hc.path_nodes(cache, child_toks)[-1][0]
    assert hc.path_nodes(cache, child_toks)[0][0] is parent and len(parent.children) == 1
    assert (md.get(parent).first_owner, md.get(child).first_owner) == (0, 1)
    locked, fillers = fill_lane_locked(cache, 0)
    assert free_counts(cache)[0] == 0

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert (child.evicted or child.parent is None) and parent.evicted
    assert all(not x.evicted and x.parent is not None for x in locked + fillers)
    c = counters_of(cache)
    assert c.load_backs == 1 and c.refused == 0 and c.leaves_evicted == 2
    assert c.pages_evicted_per_lane == [1, 1, 0, 0]
    for x in locked:
        cache.dec_lock_ref(x)
    assert_reloaded(cache, target)
    cache.token_to_kv_pool_allocator.debug_check_classes()


def test_prune_keeps_an_older_leaf_a_later_pick_made_redundant():
    """The walk takes the oldest lane-0 leaf, then a two-page leaf for lane 1 that also
    frees lane 0: the first pick is dropped again and survives the load-back."""
    cache = hc.build_cpu_hicache(4, 4, 6)
    target = evicted_target(cache, 4)  # one page in every lane
    single = leaf_chain(cache, 0)  # lane 0, oldest
    double = leaf_chain(cache, 0, pages=2)  # lanes 0 and 1
    locked = []
    for lane in (0, 1):
        more, _ = fill_lane_locked(cache, lane, spare_others=1)
        locked += more
    assert free_counts(cache)[:2] == [0, 0] and min(free_counts(cache)[2:]) >= 1

    indices, _ = load(cache, target)

    assert len(indices) == len(target)
    assert double.evicted or double.parent is None
    assert not single.evicted and single.parent is not None
    c = counters_of(cache)
    assert c.leaves_evicted == 1 and c.pages_evicted_per_lane == [1, 1, 0, 0]
    for x in locked:
        cache.dec_lock_ref(x)
    assert_reloaded(cache, target)
