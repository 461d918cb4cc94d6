"""Still needed? Upstream's three HiCache gates under page-owner KV, on sglang >=0.5.23.

``probe()`` puts upstream's ``PageInterleavePoolAllocator`` (N = 4 owner lanes, page 4, 6 pages per lane)
under a real ``UnifiedRadixCache`` (Python tree core, no host tier) and squeezes it: two 3-page chains in
lanes 1-3, the newest leaf (1 page) in lane 0, lane 0's other pages held by running requests. Lane free
pages [0, 4, 4, 4], so ``available_size()`` (N x page x the tightest lane) is 0. Then, unwrapped:
``load_back`` (-> ``_load_back_transfers``) of a 3-page host chain in lanes 1-3 (right: the load asked
with nothing evicted, its lanes have room); ``evict_to_free_tokens(cache, 16)`` (right: the lane-0 leaf,
4 tokens); ``_execute_kv_backup`` of a lane 1-3 chain into upstream's ``PageInterleaveHostPool`` with
host lane 0 full (right: the write asked). NEEDED while any gate evicts or refuses blind to lanes;
FIXED_UPSTREAM when all three answer right ("When it can be dropped": one condition per hook).

Invariant: the stand-ins are attributes of the probe's own objects (a controller that records loads and
writes and copies nothing, the native host pool's sizes); no upstream module state is touched. Cost:
importing upstream's unified radix cache (about 10 s on 2 cores), then three 4-node trees.
"""

from __future__ import annotations

import functools
import threading
from types import SimpleNamespace

from sglang_overlay.core.registry import FIXED_UPSTREAM, NEEDED, Finding

N, PS, PAGES = 4, 4, 6  # owner lanes, tokens per page, pages per lane (device and host)


def _original(cls, name: str):
    fn = getattr(cls, name)
    return getattr(fn, "__wrapped__", fn)


class _Tree:
    """A real allocator and cache; chains inserted with their rotation base, as upstream's prefill does."""

    def __init__(self) -> None:
        import torch
        from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        self.alloc = PageInterleavePoolAllocator(PAGES * PS, PS, N, torch.int64, "cpu", None, False)
        self.cache = UnifiedRadixCache(CacheInitParams(disable=False, req_to_token_pool=None,
            token_to_kv_pool_allocator=self.alloc, page_size=PS, eviction_policy="lru",
            tree_components=(ComponentType.FULL,), tree_core_backend="python"))  # fmt: skip
        self.next_key, self.held = 1000, []

    def chain(self, base: int, pages: int):
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        idx = self.alloc.alloc_cyclic(base, pages * PS)
        key = RadixKey(list(range(self.next_key, self.next_key + pages * PS)))
        self.next_key += 1000
        self.cache.insert(InsertParams(key=key, value=idx, rotation_base=base))
        return self.cache.match_prefix(MatchPrefixParams(key=key)).last_device_node, idx

    def squeeze(self) -> int:
        """Build the squeezed tree; its evictable tokens."""
        for base, pages in ((1, 3), (1, 3), (0, 1)):  # the lane-0 leaf is the most recently used
            self.chain(base, pages)
        self.held = [self.alloc.alloc_cyclic(0, PS) for _ in range(self.alloc.class_free_page_counts()[0])]
        self.lanes = self.alloc.class_free_page_counts()
        return self.cache.full_evictable_size()


def _load_back() -> tuple[bool, int, list[int]]:
    t, asked = _Tree(), []
    node, idx = t.chain(1, 3)
    t.cache.tree_core.commit_backup(node, idx.clone(), {})  # host slots are labels here: nothing is copied
    t.cache._evict_device_leaf(node, {ct: 0 for ct in t.cache.tree_components})
    before = t.squeeze()
    t.cache.load_back_threshold = 10  # upstream's value, set by init_hicache
    t.cache.cache_controller = SimpleNamespace(write_policy="write_through", load=lambda **kw: asked.append(kw))
    t.cache._load_back_transfers = functools.partial(_original(type(t.cache), "_load_back_transfers"), t.cache)
    t.cache.load_back(node)
    return bool(asked), before - t.cache.full_evictable_size(), t.lanes


def _capacity() -> int:
    t = _Tree()
    before = t.squeeze()
    _original(type(t.alloc), "evict_to_free_tokens")(t.alloc, t.cache, N * PS)
    return before - t.cache.full_evictable_size()


def _host_backup() -> tuple[bool, list[int]]:
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.page_interleave import PageInterleavePlacement, PageShardSpec
    from sglang.srt.mem_cache.pool_host.group import HostPoolGroup, PoolEntry
    from sglang.srt.mem_cache.pool_host.page_interleave import PageInterleaveHostPool

    t, writes = _Tree(), []
    node, idx = t.chain(1, 3)
    native = SimpleNamespace(size=(PAGES + 1) * PS, page_size=PS, lock=threading.RLock(), layout="layer_first",
                             device="cpu", can_use_write_back_jit=False, shared_allocation_domain=None)  # fmt: skip
    spec = PageShardSpec(shard_rank=0, shard_size=N, page_size=PS, max_prefix_tokens=N * PS * 4, chunk_tokens=PS * 4)
    host = PageInterleaveHostPool(native, PageInterleavePlacement(spec))
    for _ in range(PAGES):
        host.alloc(PS, start_owner=0)  # host lane 0 full of pages nothing can evict
    group = HostPoolGroup([PoolEntry(PoolName.KV, host, None, lambda i: i, is_primary_index_anchor=True)])
    t.cache.cache_controller = SimpleNamespace(write_policy="write_through", mem_pool_host=group,
                                               write=lambda *a, **kw: writes.append(kw))  # fmt: skip
    _original(type(t.cache), "_execute_kv_backup")(t.cache, node, idx, {}, [])
    return bool(writes), host._slots.class_free_page_counts()


def probe() -> Finding:
    asked, load_evicted, lanes = _load_back()
    cap_evicted, (written, host_lanes) = _capacity(), _host_backup()
    wrong = [said for right, said in (
        (asked and not load_evicted, f"load_back of a {3 * PS}-token host chain in lanes 1-3 evicted {load_evicted} "
                                     f"tokens, then {'asked for the load' if asked else 'refused it'}"),
        (cap_evicted <= PS, f"evict_to_free_tokens({N * PS}) evicted {cap_evicted} tokens where the one {PS}-token "
                            "lane-0 leaf covers it"),
        (written, f"_execute_kv_backup of a chain in lanes 1-3 refused with host lane free pages {host_lanes}"),
    ) if not right]  # fmt: skip
    if not wrong:
        return Finding(FIXED_UPSTREAM, f"upstream's load-back, capacity and host-backup gates answer per owner lane "
                       f"(lane free pages {lanes}: load asked with 0 evicted, {cap_evicted} tokens evicted for a "
                       "page per lane, backup written)")  # fmt: skip
    return Finding(NEEDED, f"upstream gates on PageInterleavePoolAllocator's min-lane available_size() = "
                   f"{N * PS * min(lanes)} with lane free pages {lanes} and evicts by LRU blind to lanes: "
                   f"{'; '.join(wrong)}")  # fmt: skip
