"""cp-hicache-owner-lanes on sglang 0.5.23: the host-backup gate per owner lane, on upstream's real
``UnifiedRadixCache._execute_kv_backup``, HybridCacheController, ``PageInterleaveHostPool`` and
transfer engine (CPU; stand-ins named in this folder's hicache_cpu.py). Write-through: every
insert is backed up at once.

Each scenario runs twice, the same way: through the hook and through upstream's original (an instance
attribute bypassing any class-level hook). With ``SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes`` the
hook is not installed and the patched halves fail (failing-first evidence).
"""

from __future__ import annotations

import functools

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes.unified import host_backup as hb
from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.support.hicache_tensor_count import count_tensor_work
from tests.support.hooked import around


def _cache_class():
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    return UnifiedRadixCache


@pytest.fixture(scope="module", autouse=True)
def hook():
    with around(_cache_class(), "_execute_kv_backup", hb.execute_kv_backup_hook, "cp-hicache-owner-lanes"):
        yield


def upstream_only(h):
    """Route this cache's backups through upstream's own ``_execute_kv_backup``."""
    fn = _cache_class().__dict__["_execute_kv_backup"]
    h.cache._execute_kv_backup = functools.partial(getattr(fn, "__wrapped__", fn), h.cache)


def host_slots(h):
    return h.cc.mem_pool_host.anchor_entry.host_pool._slots


def host_only(h) -> set:
    out, stack = set(), list(h.tree.root_node.children.values())
    while stack:
        x = stack.pop()
        stack.extend(x.children.values())
        if x.evicted:
            out.add(x)
    return out


def lane0_full(upstream: bool, cached: bool):
    """Host lane 0 full: its pages held outside the tree (``cached=False``: nothing of lane 0 is
    evictable) or by host-only lane-0 chains; lanes 1-3 have room."""
    h = Harness(n=4, ps=4, pages_per_rank=6)
    if upstream:
        upstream_only(h)
    if cached:
        while h.cc.mem_pool_host.anchor_entry.host_pool._slots.class_free_page_counts()[0]:
            keys, _ = h.chain(0, 1)
            h.to_host(keys)
    else:
        h.held_host = [
            host_slots(h).alloc_cyclic(start_class=0, need_size=h.ps)
            for _ in range(host_slots(h).class_free_page_counts()[0])
        ]
    assert host_slots(h).class_free_page_counts()[0] == 0
    return h


def backups(h, count):
    """``count`` one-page chains cycling lanes 1-3, each demoted once backed up: (backed up, host nodes lost)."""
    backed = lost = 0
    for i in range(count):
        before = host_only(h)
        keys, _ = h.chain(1 + i % 3, 1)
        assert keys is not None
        node = h.tree.node_by_id(h.match(keys).last_device_node)
        backed += bool(node.backuped)
        lost += len(before - host_only(h))
        if node.backuped:
            h.to_host(keys)
    return backed, lost


def test_a_full_lane_no_longer_refuses_backups_into_lanes_with_room():
    """Host lane 0 held whole: upstream refuses every backup (its min-lane gate reads 0 and nothing
    is evictable); through the hook each backup into lanes 1-3 goes through."""
    assert backups(lane0_full(upstream=True, cached=False), 5) == (0, 0)
    h = lane0_full(upstream=False, cached=False)
    assert backups(h, 12) == (12, 0)
    assert host_slots(h).class_free_page_counts()[0] == 0 and "available_size" not in h.cc.mem_pool_host.__dict__


def test_no_host_node_is_evicted_for_a_backup_whose_lanes_have_room():
    """Host lane 0 full of cached chains: upstream evicts one of them for a lane-1 backup that had room;
    the hook evicts none, over 30 backups."""
    assert backups(lane0_full(upstream=True, cached=True), 30) == (30, 1)
    assert backups(lane0_full(upstream=False, cached=True), 30) == (30, 0)


def test_a_backup_into_a_short_lane_keeps_upstreams_eviction():
    """A lane-0 backup with host lane 0 full of cached chains: the hook steps aside, upstream's
    lane-blind host eviction runs, with the same outcome on both sides."""
    outcomes = []
    for upstream in (True, False):
        h = lane0_full(upstream=upstream, cached=True)
        before = host_only(h)
        keys, _ = h.chain(0, 1)
        node = h.tree.node_by_id(h.match(keys).last_device_node)
        outcomes.append((node.backuped, len(before - host_only(h)), host_slots(h).class_free_page_counts()))
    assert outcomes[0] == outcomes[1] and outcomes[0][0] and outcomes[0][1] == 1


def test_the_room_check_reads_lengths_only():
    h = lane0_full(upstream=False, cached=False)
    keys, _ = h.chain(1, 2)
    node = h.match(keys).last_device_node
    with count_tensor_work() as work:
        fits = hb.lanes_have_room(h.cache, node, 2 * h.ps)
    assert fits and work.aten_ops == [] and work.host_syncs == 0
    assert hb.host_free_per_lane(h.cache) == host_slots(h).class_free_page_counts()


def test_plain_pools_and_raising_calls_keep_upstreams_gate():
    h = Harness(interleaved=False)
    calls = []

    def original(self, *args, **kwargs):
        calls.append((self, args, kwargs))
        return "upstream"

    assert hb.execute_kv_backup_hook(original, h.cache, 1, [0] * 4, {}, [], future=1) == "upstream"
    assert hb._host_group(h.cache) is None and calls == [(h.cache, (1, [0] * 4, {}, []), {"future": 1})]

    h = lane0_full(upstream=False, cached=False)
    keys, _ = h.chain(1, 1)
    node = h.match(keys).last_device_node

    def raising(self, *args, **kwargs):
        assert self.cache_controller.mem_pool_host.available_size() >= 4  # the shadow is in place
        raise RuntimeError("upstream failed")

    with pytest.raises(RuntimeError, match="upstream failed"):
        hb.execute_kv_backup_hook(raising, h.cache, node, [0] * 4, {}, [])
    assert "available_size" not in h.cc.mem_pool_host.__dict__  # removed even when the call raises


def test_upstream_gets_every_argument_and_an_earlier_available_size_is_put_back():
    """Both branches on a classed pool (a backup into a full lane, one into lanes with room) hand upstream
    the call as made; an ``available_size`` already on the group's instance (another hook's, say) is what
    the shadow reads and what stays there afterwards."""
    h = lane0_full(upstream=False, cached=False)
    group = h.cc.mem_pool_host
    full_lane = h.match(h.chain(0, 1)[0]).last_device_node  # its backup was refused: lane 0 is full
    roomy = h.match(h.chain(1, 1)[0]).last_device_node
    calls = []

    def original(self, *args, **kwargs):
        calls.append((self, args, kwargs, group.available_size()))
        return "upstream"

    def earlier():
        return 1

    group.__dict__["available_size"] = earlier
    for node in (full_lane, roomy):
        assert hb.execute_kv_backup_hook(original, h.cache, node, [0] * 4, {}, [], future=1) == "upstream"
        assert group.__dict__["available_size"] is earlier
    assert calls == [
        (h.cache, (full_lane, [0] * 4, {}, []), {"future": 1}, 1),  # upstream's gate reads the group as it is
        (h.cache, (roomy, [0] * 4, {}, []), {"future": 1}, 4),  # room in lanes 1..: the node's 4 tokens
    ]
