"""The trees the 0.5.23 (unified) adapter benchmarks on, and how it reads them outside the timing.

Built on the CPU harness of the unified release's tests (``tests/patches/cp_hicache_owner_lanes/unified/
hicache_cpu.py``: real UnifiedRadixCache, HybridCacheController, PageInterleavePoolAllocator, host pool and
transfer engine; write-through; N = 8 owner lanes, page 4): first the load targets (3-10 page chains at random
rotation bases, demoted to host), then the evictable leaves (1-2 page chains at random bases, 30% of them
one-page children of an earlier chain, in insertion = LRU order), about 3% of the leaves locked by running
requests, then running requests hold pages until lanes 2 and 5 have no free page and the other lanes a few
(enough for every load, so they never become short).

Invariant: the same seed builds the same tree (each side gets its own); lanes per node come from the
rotation phase (closed form, no tensor). Cost: the build, O(leaves); each snapshot O(device nodes).
"""

from __future__ import annotations

import random

N = 8
PS = 4
SHORT_LANES = (2, 5)
LOCKED_FRACTION = 0.03
CHILD_FRACTION = 0.3
BATCH = 256  # inserts between two settles of the write-through backups


def run_lane_pages(start, pages, n=N):
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    return PageInterleavePoolAllocator._class_counts(start % n, pages, n)


def workload(num_leaves: int, num_loads: int, seed: int):
    """The deterministic specs both trees are built from: specs are drawn until the tree
    has ``num_leaves`` evictable leaves (leaves not locked by a running request)."""
    rng = random.Random(seed)
    targets = [(rng.randrange(N), rng.randint(3, 10)) for _ in range(num_loads)]
    leaves = []  # (parent index or None, base, pages)
    is_leaf = []
    want = int(num_leaves / (1 - LOCKED_FRACTION)) + 1
    count = 0
    while count < want:
        i = len(leaves)
        if i and rng.random() < CHILD_FRACTION:
            p = rng.randrange(i)
            while leaves[p][0] is not None:  # children hang under root chains only
                p = rng.randrange(i)
            leaves.append((p, leaves[p][1], 1))
            if is_leaf[p]:
                is_leaf[p] = False
                count -= 1
        else:
            leaves.append((None, rng.randrange(N), rng.randint(1, 2)))
        is_leaf.append(True)
        count += 1
    leaf_ids = [i for i, x in enumerate(is_leaf) if x]
    locked = sorted(rng.sample(leaf_ids, len(leaf_ids) - num_leaves))
    return targets, leaves, locked


def headroom(num_loads: int) -> int:
    """Free pages left on lanes that are not short: enough for every load of the tree."""
    return 2 * num_loads + 4


def build_tree(num_leaves: int, num_loads: int, seed: int, device: str = "cpu"):
    """A Harness whose tree holds the workload; returns (harness, [(load node id, its keys)])."""
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness

    targets, leaves, locked = workload(num_leaves, num_loads, seed)
    use = [0] * N
    for parent, base, pages in leaves:
        start = base if parent is None else base + leaves[parent][2]
        use = [u + c for u, c in zip(use, run_lane_pages(start, pages))]
    room = headroom(num_loads)
    h = Harness(n=N, ps=PS, pages_per_rank=max(use) + room + 4, layers=1, device=device)
    loads = []
    for base, pages in targets:
        keys, _ = h.chain(base, pages)
        loads.append((h.to_host(keys), keys))
    made = []  # (keys, device indices) per leaf spec
    for i, (parent, base, pages) in enumerate(leaves):
        prefix, prefix_idx = ([], None) if parent is None else made[parent]
        start = (base + len(prefix) // PS) % N
        idx = h.alloc.alloc_cyclic(start_class=start, need_size=pages * PS)
        assert idx is not None, "pool sized from the workload's lane use"
        keys = prefix + h.fresh_keys(pages)
        value = idx if parent is None else torch.cat([prefix_idx, idx])
        h.cache.insert(InsertParams(key=RadixKey(keys), value=value, rotation_base=base, prev_prefix_len=len(prefix)))
        made.append((keys, idx if parent is None else None))
        if i % BATCH == BATCH - 1:
            h.settle()
    h.settle()
    for i in locked:  # running requests on these prefixes
        h.cache.inc_lock_ref(h.match(made[i][0]).last_device_node)
    free = h.alloc.class_free_page_counts()
    for lane in range(N):
        h.hold(lane, free[lane] - (0 if lane in SHORT_LANES else room))
    return h, loads


def device_lanes(h) -> dict:
    """{node: pages per lane} of every device-resident node (closed form from the rotation phase)."""
    root = h.tree.root_node
    out = {}
    stack = [(child, 0) for child in root.children.values()]
    while stack:
        node, prefix = stack.pop()
        pages = len(node.key) // PS
        stack.extend((c, prefix + pages) for c in node.children.values())
        if not node.evicted:
            out[node] = run_lane_pages(node.rotation_base + prefix, pages)
    return out


def locked(node) -> bool:
    return max(cd.lock_ref for cd in node.component_data) > 0


def load_need(h, node_id):
    """(pages per lane the load draws, tokens): the top evicted node's phase, closed form."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.unified.planning import evicted_segment

    seg = evicted_segment(h.tree, node_id)
    tokens = sum(len(x.key) for x in seg)
    return list(run_lane_pages(h.tree.rotation_phase_of(seg[0].id), tokens // PS)), tokens
