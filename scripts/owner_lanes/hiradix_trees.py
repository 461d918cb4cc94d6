"""The trees the pre-0.5.23 (hiradix) adapter benchmarks on, upstream's load-back path, and host-sync counting.

A :class:`Tree` is upstream's real HiRadixCache / PageInterleavePoolAllocator / HiCacheController on the CPU
(``tests/patches/cp_hicache_owner_lanes/hiradix/hicache_cpu.py``; the copy engine is a CPU stand-in), N = 8
owner lanes, page 16: shared system prompts with 1-3 page conversation leaves, load targets (the prompt plus a
16-32 page history, evicted to host), every lane then filled with one-page chains to 0-2 free pages (drawn per
lane): the device pool under shared-KV pressure. ``upstream_fallback_load_back`` is upstream's ``load_back``
with its ``evict(num_tokens)``-then-retry fallback, the one change being the owner-classed allocation (the
same call as the patch's), since upstream's plain ``alloc()`` raises on this allocator.

Invariant: the same seed builds the same tree; lanes per node come from the patch's metadata (no tensor).
Cost: the build, O(leaves); a snapshot O(device nodes).
"""

from __future__ import annotations

import itertools
import random
import time

N = 8
PS = 16


class Tree:
    """A page-interleaved HiRadixCache filled with a deterministic workload."""

    def __init__(self, num_leaves: int, num_requests: int, seed: int, device: str = "cpu", policy="write_back"):
        import torch

        from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.eviction import evict_planned
        from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc

        self.hc = hc
        rng = random.Random(seed)
        num_prompts = max(16, num_leaves // 100)
        prompt_pages = [rng.randint(4, 16) for _ in range(num_prompts)]
        leaf_specs = [(rng.randrange(num_prompts), rng.randint(1, 3)) for _ in range(num_leaves)]
        target_specs = [(rng.randrange(num_prompts), rng.randint(16, 32)) for _ in range(num_requests)]
        used = sum(prompt_pages) + sum(p for _, p in leaf_specs)
        per_rank = -(-used // N) * 21 // 20 + 8
        self.cache = cache = hc.build_cpu_hicache(
            N, PS, per_rank, write_policy=policy, host_ratio=3.0, layers=1, heads=1, head_dim=1, device=device
        )
        alloc = cache.token_to_kv_pool_allocator
        tok = itertools.count(1)

        def toks(pages):
            return [next(tok) for _ in range(pages * PS)]

        def insert(tokens, value, base):
            cache.insert(hc.InsertParams(key=hc.key_of(tokens), value=value, rotation_base=base))

        self.prompts = []  # shared prompts
        for pages in prompt_pages:
            t = toks(pages)
            new, base = hc.alloc_chain(cache, 0, len(t), None)
            insert(t, new.clone(), base)
            self.prompts.append((t, new, base))
        self.targets = []  # request targets: prompt + a long history, evicted to host
        for p, pages in target_specs:
            pt, pidx, base = self.prompts[p]
            t = pt + toks(pages)
            new, _ = hc.alloc_chain(cache, len(pt), len(t), base)
            insert(t, torch.cat([pidx, new]), base)
            evict_planned(cache, [hc.path_nodes(cache, t)[-1][0]])
            hc.settle(cache)
            self.targets.append(t)
        for start in range(0, num_leaves, 512):  # conversation leaves, allocated in batches like a prefill batch
            seqs = [(self.prompts[p], toks(pages)) for p, pages in leaf_specs[start : start + 512]]
            pre = torch.tensor([len(pt) for (pt, _, _), _ in seqs], dtype=torch.int64)
            seq = torch.tensor([len(pt) + len(lt) for (pt, _, _), lt in seqs], dtype=torch.int64)
            bases = [b for (_, _, b), _ in seqs]
            zeros = torch.zeros(len(seqs), dtype=torch.int64)
            out = alloc.alloc_extend(pre, pre, seq, seq, zeros, int((seq - pre).sum()), rotation_bases=bases)
            if out is None:  # a lane ran dry: place this batch one by one, skip what cannot fit
                for (pt, pidx, base), lt in seqs:
                    new, _ = hc.alloc_chain(cache, len(pt), len(pt) + len(lt), base)
                    if new is not None:
                        insert(pt + lt, torch.cat([pidx, new]), base)
                continue
            off = 0
            for (pt, pidx, base), lt in seqs:
                insert(pt + lt, torch.cat([pidx, out[off : off + len(lt)]]), base)
                off += len(lt)
        # fill the remaining pages with one-page chains until every lane is tight (0-2 free pages, drawn per lane)
        tight = [rng.randint(0, 2) for _ in range(N)]
        for lane in range(N):
            while alloc.class_free_page_counts()[lane] > tight[lane]:
                t = toks(1)
                new, _ = hc.alloc_chain(cache, 0, len(t), lane)
                insert(t, new, lane)
        self.num_leaves = len(cache.evictable_leaves)

    def chain(self, target):
        """(hit node, chain metadata of the nodes to load, resident ancestor), as load_back walks it."""
        from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.allocation import chain_metas
        from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of

        node = self.hc.path_nodes(self.cache, target)[-1][0]
        nodes = []
        cur = node
        while cur.evicted:
            nodes.insert(0, cur)
            cur = cur.parent
        return node, chain_metas(self.cache, state_of(self.cache), cur, nodes), cur


def device_lanes(cache) -> dict:
    """{node: pages per lane} of every device-resident node but the root (from the patch's metadata)."""
    from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md

    out = {}
    stack = list(cache.root_node.children.values())
    while stack:
        x = stack.pop()
        stack.extend(x.children.values())
        if x.value is not None:
            out[x] = md.get(x).owner_counts(N)
    return out


def path_of(node) -> set:
    """``node`` and its ancestors: the path a load-back locks."""
    path = set()
    while node is not None:
        path.add(node)
        node = node.parent
    return path


def locked(node) -> bool:
    return node.lock_ref > 0


class SyncCounter:
    """Host syncs inside a block: real ones on CUDA (sync debug mode), on the CPU the
    ``aten._local_scalar_dense`` reads that are syncs on a GPU."""

    def __init__(self, device: str):
        self.device, self.count = device, 0

    def __enter__(self):
        if self.device == "cuda":
            import warnings

            import torch

            self._warn = warnings.catch_warnings(record=True)
            self._log = self._warn.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        else:
            from tests.support.hicache_tensor_count import count_tensor_work

            self._cm = count_tensor_work()
            self._work = self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        if self.device == "cuda":
            import torch

            torch.cuda.set_sync_debug_mode(0)
            self.count = sum("synchroniz" in str(w.message) for w in self._log)
            self._warn.__exit__(*exc)
        else:
            self._cm.__exit__(*exc)
            self.count = self._work.host_syncs
        return False


def upstream_fallback_load_back(cache, node):
    """Upstream's load_back with its evict(num_tokens)-then-retry fallback, owner-classed allocation:
    ``(loaded, ms in evict(num_tokens), pages it freed)``."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.allocation import alloc_owner_classed, chain_metas
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.load_back import commit_load
    from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import state_of

    alloc = cache.token_to_kv_pool_allocator
    last_hit, nodes = node, []
    while node.evicted:
        nodes.insert(0, node)
        node = node.parent
    cache.inc_lock_ref(node)
    for x in nodes:
        x.protect_host()
    metas = chain_metas(cache, state_of(cache), node, nodes)
    last_loc = None if node is cache.root_node else node.value[-1:]
    num_tokens = sum(len(x.host_value) for x in nodes)
    before = sum(alloc.class_free_page_counts())
    device = alloc_owner_classed(alloc, metas, last_loc)
    evict_ms, evicted_pages = 0.0, 0
    if device is None:
        t0 = time.perf_counter()
        cache.evict(EvictParams(num_tokens=num_tokens))
        evict_ms = (time.perf_counter() - t0) * 1e3
        evicted_pages = sum(alloc.class_free_page_counts()) - before
        device = alloc_owner_classed(alloc, metas, last_loc)
    cache.dec_lock_ref(node)
    if device is None:
        for x in nodes:
            x.release_host()
        return False, evict_ms, evicted_pages
    commit_load(cache, nodes, last_hit, device, metas)
    return True, evict_ms, evicted_pages
