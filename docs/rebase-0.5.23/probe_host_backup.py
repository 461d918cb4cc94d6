"""Probe: upstream sglang 0.5.23's host backup under page-interleaved KV, when the host pool is short (CPU).

The host pool under --enable-kv-cache-sharding is classed too (``PageInterleaveHostPool``: a
``PageInterleavePoolAllocator`` over the host rows; ``available_size()`` is N x page x the smallest
lane's free host pages), and a backup draws its host slots with ``alloc_cyclic`` from the node's
rotation phase. ``UnifiedRadixCache._execute_kv_backup`` checks ``available_size()`` and calls
lane-blind LRU ``evict_host(needed)`` once. This probe measures what that does when one host lane is
full: which host nodes it evicts (by lane), and whether the backup then happens.

Real upstream code throughout, on the CPU harness of the 0.5.23 tests (tests/support/hicache_cpu_0523.py,
stand-ins named there): UnifiedRadixCache, HybridCacheController, PageInterleavePoolAllocator,
PageInterleaveHostPool, the transfer engine. Write-through (every insert is backed up at once).

Run: cd /work/main && .venv-0.5.23/bin/python docs/rebase-0.5.23/probe_host_backup.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tests.support.hicache_cpu_0523 import Harness  # noqa: E402


def host_slots(h):
    """The classed allocator of the KV host pool (PageInterleaveHostPool._slots)."""
    return h.cc.mem_pool_host.anchor_entry.host_pool._slots


def host_lanes(h):
    return host_slots(h).class_free_page_counts()


def host_only_nodes(h):
    out = []
    stack = list(h.tree.root_node.children.values())
    while stack:
        x = stack.pop()
        stack.extend(x.children.values())
        if x.evicted:
            out.append(x)
    return out


def lanes_of_node(h, x):
    phase = h.tree.rotation_phase_of(x.id) % h.n
    pages = len(x.key) // h.ps
    return [sum(1 for p in range(pages) if (phase + p) % h.n == c) for c in range(h.n)]


def evicted_by_lane(h, before):
    gone = [x for x in before if x not in set(host_only_nodes(h))]
    return [sum(before[x][c] for x in gone) for c in range(h.n)]


def probe(lane0: str, inserts: int = 30):
    """Host lane 0 full, lanes 1-3 with room. ``lane0``: "held" (its pages held outside the tree, e.g.
    by transfers in flight: nothing of lane 0 is evictable) or "cached" (host-only lane-0 chains, least
    recently used). Then ``inserts`` one-page chains cycling lanes 1-3 are inserted (write-through: each
    is backed up at once into its own lane, which has room) and demoted to host; then one lane-0 chain."""
    h = Harness(n=4, ps=4, pages_per_rank=6)
    slots = host_slots(h)
    if lane0 == "held":
        held = [slots.alloc_cyclic(start_class=0, need_size=h.ps) for _ in range(host_lanes(h)[0])]
        assert all(x is not None for x in held)
    else:
        while host_lanes(h)[0]:
            keys, _ = h.chain(0, 1)
            h.to_host(keys)
    assert host_lanes(h)[0] == 0
    print(f"host lane 0 {lane0}:")
    print(f"  host free pages per lane at the start: {host_lanes(h)} (available_size() = "
          f"{h.cc.mem_pool_host.available_size()} tokens: the smallest lane's)")
    evicted, backed = [0] * h.n, 0
    for i in range(inserts):
        lane = 1 + i % 3
        before = {x: lanes_of_node(h, x) for x in host_only_nodes(h)}
        keys, _ = h.chain(lane, 1)
        if keys is None:  # device lane full of nodes that could not be demoted (never backed up)
            print(f"  insert {i}: device lane {lane} is full of nodes without a host copy; stopping")
            inserts = i
            break
        node = h.tree.node_by_id(h.match(keys).last_device_node)
        backed += bool(node.backuped)
        evicted = [a + b for a, b in zip(evicted, evicted_by_lane(h, before))]
        if node.backuped:
            h.to_host(keys)
    print(f"  {inserts} backups into lanes 1-3 (each lane had room): {backed} backed up; host pages "
          f"evicted per lane meanwhile: {evicted}; host free after: {host_lanes(h)}")
    before = {x: lanes_of_node(h, x) for x in host_only_nodes(h)}
    keys, _ = h.chain(0, 1)
    node = h.tree.node_by_id(h.match(keys).last_device_node) if keys is not None else None
    print(f"  one backup needing [1, 0, 0, 0] (lane 0 full, {sum(1 for v in before.values() if v[0])} host-only "
          f"lane-0 nodes): host pages evicted per lane {evicted_by_lane(h, before)}, backed up: {node is not None and node.backuped}")
    return evicted, backed


if __name__ == "__main__":
    probe("held")
    probe("cached")
