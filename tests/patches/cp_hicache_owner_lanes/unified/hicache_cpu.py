"""CPU construction of sglang 0.5.23's HiCache over a page-interleaved KV pool (reusable builder).

Real upstream code: ``UnifiedRadixCache`` (Python ``UnifiedTreeCore``, as
``--enable-kv-cache-sharding`` forces), ``init_hicache`` -> ``attach_hybrid_pool_to_unified_cache``
-> ``HybridCacheController``, the MHA host pool wrapped in ``PageInterleaveHostPool``,
``PageInterleavePoolAllocator`` (or ``PagedTokenToKVPoolAllocator`` with
``interleaved=False``), the real ``L2TransferEngine`` (direct backend, CPU streams and
events) for write-through backups and load-backs, and a published ``ServerArgs``.

Stand-ins, for what needs a GPU (a CPU KV pool class without NCCL, an unpinned host pool, a row-copy
``transfer_kv_direct``), live in ``hicache_cpu_standins.py``, each small and named STAND-IN there.

With ``shard_rank=0`` the striped host pool moves only rank 0's pages; the transfer
engine, its submission/ack flow and the striping stay upstream's. Upstream's
``load_back_threshold`` is 10 tokens (loads below it are refused before any eviction).

Invariant: every Harness is its own cache, allocator, pools and controller (the process shares only the
stand-ins, the published ``ServerArgs`` and the gloo group). Cost: a tenth of a second or less per Harness
on the CPU; the first in a process also imports upstream's cache modules (seconds).

Usage::

    h = Harness(n=4, ps=4, pages_per_rank=6)
    keys, idx = h.chain(base=1, pages=3)      # insert a 3-page chain starting in lane 1
    node = h.to_host(keys)                    # demote it (write-through: host copy kept)
    h.hold(0, h.alloc.class_free_page_counts()[0])   # running requests drain lane 0
    ok, evicted = h.load(node)                # cache.load_back, tokens evicted for it
"""

from __future__ import annotations

import functools
from typing import List, Optional

import torch

from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu_standins import (
    gloo_group,
    install_cpu_stand_ins,
    pool_classes,
    publish_server_args,
)


class Harness:
    """One real UnifiedRadixCache with HiCache on the CPU, and small helpers to drive it.

    ``n`` owner lanes, ``ps`` tokens per (physical) page, ``pages_per_rank`` usable
    device pages per lane. ``interleaved=False`` builds a plain paged allocator and
    pool instead (no lanes; chains then take no base). ``device="cuda"`` puts the KV pool and the
    allocator's index tensors on the GPU (the host pool stays in host memory, as upstream's does).
    """

    def __init__(
        self,
        n: int = 4,
        ps: int = 4,
        pages_per_rank: int = 6,
        write_policy: str = "write_through",
        interleaved: bool = True,
        layers: int = 2,
        eviction_policy: str = "lru",
        device: str = "cpu",
        enable_metrics: bool = False,
    ):
        from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.page_interleave import PageShardSpec
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        server_args = publish_server_args(write_policy, ps)
        install_cpu_stand_ins()
        plain_pool, interleaved_pool = pool_classes()
        self.n, self.ps, self.interleaved = n, ps, interleaved
        self.device = torch.device(device)  # where the allocator's indices live (and so every tree value)
        per_rank_slots = pages_per_rank * ps
        pool_kw = dict(
            page_size=ps,
            dtype=torch.float32,
            head_num=2,
            head_dim=4,
            layer_num=layers,
            device=device,
            enable_memory_saver=False,
            enable_alt_stream=False,
        )
        if interleaved:
            spec = PageShardSpec(
                shard_rank=0, shard_size=n, page_size=ps, max_prefix_tokens=n * ps * 4, chunk_tokens=ps * 4
            )
            self.kv = interleaved_pool(n * (per_rank_slots + ps), shard_spec=spec, **pool_kw)
            self.alloc = PageInterleavePoolAllocator(per_rank_slots, ps, n, torch.int64, device, self.kv, False)
        else:
            size = n * per_rank_slots
            self.kv = plain_pool(size + ps, **pool_kw)
            self.alloc = PagedTokenToKVPoolAllocator(size, ps, torch.int64, device, self.kv, False)
        params = CacheInitParams(
            disable=False,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=self.alloc,
            page_size=ps,
            tp_cache_group=gloo_group(),
            eviction_policy=eviction_policy,
            tree_components=(ComponentType.FULL,),
            tree_core_backend="python",
            enable_metrics=enable_metrics,  # upstream's metrics collector, as --enable-metrics builds it
        )
        self.cache = UnifiedRadixCache(params)
        self.cache.init_hicache(server_args, params)
        self.cc = self.cache.cache_controller
        assert self.cc.write_policy == write_policy, (self.cc.write_policy, write_policy)
        self.tree = self.cache.tree_core
        self.next_tok = 1000
        self.held: List[torch.Tensor] = []
        self.evicted_tokens = 0  # Full tokens evicted, as reported to upstream's eviction metrics
        real_metrics = self.cache.update_eviction_metrics

        def counting_metrics(num_evicted, start_time):
            assert isinstance(start_time, float), start_time  # upstream's metrics subtract it from perf_counter()
            self.evicted_tokens += num_evicted
            return real_metrics(num_evicted, start_time)

        self.cache.update_eviction_metrics = counting_metrics

    # ---- building state -----------------------------------------------------------

    def settle(self) -> None:
        """Run queued write-through backups and load-backs to completion (CPU: synchronous)."""
        self.cc.start_writing()
        self.cache.writing_check()
        self.cc.start_loading()
        self.cache.loading_check()

    def fresh_keys(self, pages: int) -> list:
        keys = list(range(self.next_tok, self.next_tok + pages * self.ps))
        self.next_tok += 100_000
        return keys

    def alloc_run(self, base: Optional[int], pages: int) -> Optional[torch.Tensor]:
        if not self.interleaved:
            return self.alloc.alloc(pages * self.ps)
        return self.alloc.alloc_cyclic(start_class=base, need_size=pages * self.ps)

    def chain(self, base: Optional[int], pages: int, prefix: Optional[list] = None):
        """Insert a chain of ``pages`` new pages (after the device-resident ``prefix``, if any);
        lane of its first page ``base`` (mod n) counted from the chain's start. Returns
        (keys, new device indices) or (None, None) when the lanes are short."""
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        prefix = prefix or []
        prefix_idx = self.device_indices(prefix) if prefix else torch.empty((0,), dtype=torch.int64, device=self.device)
        assert len(prefix_idx) == len(prefix), "prefix must be device-resident"
        start = None if base is None else (base + len(prefix) // self.ps) % self.n
        idx = self.alloc_run(start, pages)
        if idx is None:
            return None, None
        keys = prefix + self.fresh_keys(pages)
        value = torch.cat([prefix_idx, idx])
        rotation_base = base if self.interleaved else None
        # prev_prefix_len: the prefix slots are the tree's own (a request that matched them), not duplicates to free
        self.cache.insert(
            InsertParams(key=RadixKey(keys), value=value, rotation_base=rotation_base, prev_prefix_len=len(prefix))
        )
        self.settle()
        return keys, idx

    def random_chains(self, rng, leaves: int) -> None:
        """Up to ``leaves`` one- and two-page chains on random lanes, about a third extending an earlier one by a
        page, until the lanes run short (``rng``'s draws in a fixed order: a seed gives one tree)."""
        placed = []
        for _ in range(leaves):
            if placed and rng.random() < 0.3:
                prefix, base = rng.choice(placed)
                keys, _ = self.chain(base, 1, prefix=prefix)
            else:
                base = rng.randrange(self.n)
                keys, _ = self.chain(base, rng.randint(1, 2))
            if keys is None:
                break
            placed.append((keys, base))

    def hold(self, cls: int, pages: int) -> None:
        """Pages of one lane held by running requests (not in the tree: not evictable)."""
        for _ in range(pages):
            got = self.alloc_run(cls, 1)
            assert got is not None
            self.held.append(got)

    def release(self, i: int) -> None:
        self.alloc.free(self.held.pop(i))

    # ---- reading the tree -----------------------------------------------------------

    def match(self, keys):
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        return self.cache.match_prefix(MatchPrefixParams(key=RadixKey(keys)))

    def device_indices(self, keys) -> torch.Tensor:
        m = self.match(keys)
        return self._path_values(m.last_device_node)[: m.device_prefix_len]

    def _path_values(self, node_id) -> torch.Tensor:
        parts = []
        node = self.tree.node_by_id(node_id)
        while node is not self.tree.root_node:
            parts.append(node.component_data[0].value)  # [0]: ComponentType.FULL
            node = node.parent
        parts.reverse()
        return torch.cat(parts) if parts else torch.empty((0,), dtype=torch.int64, device=self.device)

    def path_nodes(self, node_id) -> list:
        """Nodes from the root's child down to ``node_id``."""
        out = []
        node = self.tree.node_by_id(node_id)
        while node is not self.tree.root_node:
            out.append(node)
            node = node.parent
        out.reverse()
        return out

    def device_nodes(self) -> list:
        """Every non-root node whose Full KV is on the device."""
        out, stack = [], [self.tree.root_node]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node is not self.tree.root_node and not node.evicted:
                out.append(node)
        return out

    def lanes_of(self, idx: torch.Tensor) -> List[int]:
        """Brute-force pages per lane of device indices (reads the tensor)."""
        counts = [0] * self.n
        for page in (idx[:: self.ps] // self.ps).tolist():
            counts[page % self.n] += 1
        return counts

    def owners(self, idx: torch.Tensor) -> List[int]:
        return sorted(set((idx[:: self.ps] // self.ps % self.n).tolist()))

    def host_node(self, keys):
        m = self.match(keys)
        assert m.host_hit_length == len(keys) - m.device_prefix_len, m
        return m.best_match_node

    # ---- moving KV ------------------------------------------------------------------

    def to_host(self, keys, levels: Optional[int] = None):
        """Demote the device copy of ``keys``'s chain from its deepest node up, ``levels`` nodes
        (default: all it can; write-through: the host copy stays) with upstream's
        ``_evict_device_leaf``; returns the load node id."""
        m = self.match(keys)
        tracker = {ct: 0 for ct in self.cache.tree_components}
        for i, node in enumerate(reversed(self.path_nodes(m.last_device_node))):
            if (
                (levels is not None and i >= levels)
                or node not in self.tree.evictable_device_leaves
                or not node.backuped
            ):
                break
            assert self.cache._evict_device_leaf(node.id, tracker) is None
        self.settle()
        return self.host_node(keys)

    def use_upstream(self) -> None:
        """Route this cache's load-backs to upstream's own ``_load_back_transfers``,
        bypassing any class-level hook (instance attribute)."""
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        original = UnifiedRadixCache._load_back_transfers
        original = getattr(original, "__wrapped__", original)
        self.cache._load_back_transfers = functools.partial(original, self.cache)

    def load(self, node_id):
        """``cache.load_back(node_id)``, then the H2D copy; returns (loaded, tokens evicted for it)."""
        before = self.evicted_tokens
        ok = self.cache.load_back(node_id)
        evicted = self.evicted_tokens - before
        if ok:
            self.settle()
        return ok, evicted

    def load_spec(self, node_id):
        """Upstream's own load-back spec (host indices) for ``node_id``."""
        return self.tree.build_load_back_spec(node_id, req=None)[0]

    def state(self) -> str:
        counts = self.alloc.class_free_page_counts() if self.interleaved else None
        return (
            f"class_free={counts} available_size={self.alloc.available_size()} "
            f"full_evictable={self.cache.full_evictable_size()}"
        )
