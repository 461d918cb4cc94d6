"""CPU construction of upstream's HiRadixCache over a page-interleaved KV pool, and the scheduler's moves on it.

Everything is upstream's real code (``HiRadixCache.__init__``, ``HiCacheController``,
``MHATokenToKVPool``, the MHA host pool, ``PageInterleavePoolAllocator``) except
two stand-ins for what needs a GPU (``standins.py``): the copy engine
(``CpuCopyTransferEngine``, real K/V row copies on the CPU) and the host pool's
pinned memory and server settings (``hicache_settings``).

The "device" pool is indexed by logical slot and holds every CP rank's pages
(the union of all ranks' pools); ownership is the allocator's ``l % N`` rule.
Driving it (``prefill``, ``settle``): what the scheduler does per request; the rows
written are a pure function of token, layer and K/V, so a load-back is checked row
for row (``rows_match``), and the oracles read owners from device indices alone.
Cost: in the slots asked for (the tests' caches hold at most a few thousand: tens of ms to build and
drive on the CPU; the benchmark's trees, ``scripts/owner_lanes/``, are larger).
"""

from __future__ import annotations

from array import array
from typing import Optional

import torch
from sglang.srt.mem_cache import hiradix_cache as hiradix_mod
from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import (
    EvictParams,
    InitLoadBackParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.radix_cache import RadixKey

from tests.patches.cp_hicache_owner_lanes.hiradix.standins import (
    CpuCopyTransferEngine,
    ensure_gloo_group,
    hicache_settings,
)
from tests.support.runtime import publish_cpu_runtime

LAYERS = 2
HEADS = 2
HEAD_DIM = 4


def build_cpu_hicache(
    shard_size: int,
    page_size: int,
    pages_per_rank: int,
    write_policy: str = "write_through",
    host_ratio: float = 4.0,
    eviction_policy: str = "lru",
    need_sort: bool = False,
    enable_metrics: bool = False,
    layers: int = LAYERS,
    heads: int = HEADS,
    head_dim: int = HEAD_DIM,
    device: str = "cpu",
):
    """A real HiRadixCache on the CPU; page-interleaved when ``shard_size > 1``.

    ``shard_size == 1`` builds upstream's plain paged allocator (the
    page-interleaved allocator requires N > 1): the patch must then keep
    upstream's behaviour exactly. ``device="cuda"`` puts the device KV pool and
    the allocator's index tensors on the GPU (the host pool and the stand-in copy
    engine stay as they are); only ``scripts/bench_owner_lanes.py --device cuda``
    (``scripts/owner_lanes/hiradix_trees.py``) uses it.
    """
    publish_cpu_runtime()
    group = ensure_gloo_group()
    per_rank_slots = pages_per_rank * page_size
    logical_slots = shard_size * (per_rank_slots + page_size) - page_size
    kv = MHATokenToKVPool(
        logical_slots,
        page_size=page_size,
        dtype=torch.float32,
        head_num=heads,
        head_dim=head_dim,
        layer_num=layers,
        device=device,
        enable_memory_saver=False,
        enable_alt_stream=False,
    )
    if shard_size > 1:
        allocator = PageInterleavePoolAllocator(
            per_rank_slots, page_size, shard_size, torch.int64, device, kv, need_sort
        )
    else:
        allocator = PagedTokenToKVPoolAllocator(per_rank_slots, page_size, torch.int64, device, kv, need_sort)
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=allocator,
        page_size=page_size,
        tp_cache_group=group,
        eviction_policy=eviction_policy,
        enable_metrics=enable_metrics,
    )
    with hicache_settings(write_policy, host_ratio):
        cache = hiradix_mod.HiRadixCache(params, server_args=None)
    cache.cache_controller.l2_transfer_engine = CpuCopyTransferEngine("direct")
    return cache


def settle(cache) -> None:
    """Drain the controller like the scheduler loop does: start queued copies, take acks."""
    cache.cache_controller.start_writing()
    cache.cache_controller.start_loading()
    cache.writing_check()
    cache.loading_check()


# --------------------------------------------------------------------------- driving the cache


def key_of(tokens) -> RadixKey:
    return RadixKey(array("q", tokens))


def row_content(tokens: torch.Tensor, layer: int, which: int, heads: int, dim: int) -> torch.Tensor:
    """What the model 'wrote' for these tokens: a pure function of token, layer, K/V."""
    base = tokens.to(torch.float32) * 4 + layer * 1e5 + which * 0.5
    return base[:, None, None].expand(len(tokens), heads, dim) + torch.arange(dim, dtype=torch.float32)


def write_rows(cache, indices: torch.Tensor, tokens) -> None:
    kv = cache.kv_cache
    toks = torch.tensor(list(tokens), dtype=torch.int64)
    dev = kv.k_buffer[0].device
    for layer in range(kv.layer_num):
        kv.k_buffer[layer][indices] = row_content(toks, layer, 0, kv.head_num, kv.head_dim).to(dev)
        kv.v_buffer[layer][indices] = row_content(toks, layer, 1, kv.head_num, kv.head_dim).to(dev)


def rows_match(cache, indices: torch.Tensor, tokens) -> bool:
    kv = cache.kv_cache
    toks = torch.tensor(list(tokens), dtype=torch.int64)
    return all(
        torch.equal(kv.k_buffer[layer][indices], row_content(toks, layer, 0, kv.head_num, kv.head_dim))
        and torch.equal(kv.v_buffer[layer][indices], row_content(toks, layer, 1, kv.head_num, kv.head_dim))
        for layer in range(kv.layer_num)
    )


def alloc_chain(cache, prefix_len: int, total_len: int, rotation_base: Optional[int], last_loc: int = 0):
    """Allocate device slots for positions [prefix_len, total_len) of a chain.

    Page-interleaved: upstream ``alloc_extend`` with the chain's rotation base
    (None draws the least-full class). Returns (indices, resolved base) or
    (None, base) when the allocator cannot supply the pages.
    """
    alloc = cache.token_to_kv_pool_allocator
    ps = cache.page_size
    if isinstance(alloc, PageInterleavePoolAllocator):
        bases = [rotation_base]
        pre = torch.tensor([prefix_len], dtype=torch.int64)
        seq = torch.tensor([total_len], dtype=torch.int64)
        last = torch.tensor([last_loc], dtype=torch.int64)
        out = alloc.alloc_extend(pre, pre, seq, seq, last, total_len - prefix_len, rotation_bases=bases)
        return out, bases[0]
    pages = (total_len - prefix_len) // ps
    if alloc.available_size() < pages * ps:
        return None, None
    out = alloc.alloc(pages * ps)
    return out, None


def prefill(cache, tokens, evict_first: bool = True, load_back: bool = True):
    """Serve a request for ``tokens`` like the scheduler would: reuse the device
    prefix, load back a host prefix if any, compute (write) the rest, insert.

    Returns the request's device indices (None if the pool could not hold it).
    Only page-aligned lengths are used.
    """
    ps = cache.page_size
    assert len(tokens) % ps == 0
    key = key_of(tokens)
    match = cache.match_prefix(MatchPrefixParams(key=key))
    prefix = match.device_indices
    last = match.last_device_node
    if load_back and match.best_match_node is not last and match.best_match_node.evicted:
        loaded, last = cache.init_load_back(
            InitLoadBackParams(best_match_node=match.best_match_node, host_hit_length=match.host_hit_length)
        )
        if len(loaded):
            settle(cache)
            prefix = cache.match_prefix(MatchPrefixParams(key=key)).device_indices
            last = cache.match_prefix(MatchPrefixParams(key=key)).last_device_node
    cache.inc_lock_ref(last)
    m = len(prefix)
    base = cache.rotation_base_of(last) if m else None
    new = None
    if m < len(tokens):
        last_loc = int(prefix[-1]) if m else 0
        new, base = alloc_chain(cache, m, len(tokens), base, last_loc)
        if new is None and evict_first:
            cache.evict(EvictParams(num_tokens=(len(tokens) - m) + ps * 8))
            new, base = alloc_chain(cache, m, len(tokens), base, last_loc)
        if new is None:
            cache.dec_lock_ref(last)
            return None
        write_rows(cache, new, tokens[m:])
    value = torch.cat([prefix, new]) if new is not None else prefix
    result = cache.insert(InsertParams(key=key_of(tokens), value=value.clone(), rotation_base=base))
    if new is not None and result.prefix_len > m:
        cache.token_to_kv_pool_allocator.free(new[: result.prefix_len - m])
    cache.dec_lock_ref(last)
    settle(cache)
    return value


def path_nodes(cache, tokens):
    """The nodes on ``tokens``' path (no splitting, no access-time update)."""
    ps = cache.page_size
    node, off, out = cache.root_node, 0, []
    key = key_of(tokens)
    while off + ps <= len(key):
        child = node.children.get(key.child_key_at(off, ps))
        if child is None or child.key.match_at(key, off, page_size=ps) < len(child.key):
            break
        out.append((child, off))
        off += len(child.key)
        node = child
    return out


def all_nodes(cache):
    stack, out = [cache.root_node], []
    while stack:
        n = stack.pop()
        if n is not cache.root_node:
            out.append(n)
        stack.extend(n.children.values())
    return out


def oracle_owner_counts(node, shard_size: int, page_size: int):
    """Owner counts derived from the node's device indices (tensor path: test oracle only)."""
    pages = node.value[::page_size] // page_size
    return tuple(int(x) for x in torch.bincount(pages % shard_size, minlength=shard_size))


def oracle_first_owner(node, shard_size: int, page_size: int) -> int:
    return int(node.value[0]) // page_size % shard_size
