"""Probe: upstream sglang 0.5.23's lane-blind HiCache load-back under page-interleaved KV (CPU).

Real upstream code: UnifiedRadixCache (Python UnifiedTreeCore, as --enable-kv-cache-sharding forces),
init_hicache -> attach_hybrid_pool_to_unified_cache -> HybridCacheController, the MHA host pool wrapped
in PageInterleaveHostPool, PageInterleavePoolAllocator, the real L2TransferEngine (direct backend, CPU
events/streams) for write-through backups and load-backs.
Stand-ins (named, small):
  * CpuPageInterleaveMHAPool: PageInterleaveKVPoolMixin + MHATokenToKVPool with the placement set but
    without _init_page_shard_state (that builds a PyNcclCommunicator and the gather scratch: GPU only).
    Only its class (isinstance PageInterleaveKVPoolMixin -> host pool gets wrapped) and `placement` matter here.
  * host pool built with pin_memory=False (the default calls cudaHostRegister).
  * cpu_transfer_kv_direct: the sgl_kernel `transfer_kv_direct` op (not importable without CUDA; the
    direct io backend's only data mover) replaced by per-layer index copies. The transfer engine, its
    submission/ack flow and the page-interleave host striping (rank 0 moves only its own pages) stay real.
Run: HF_HUB_OFFLINE=1 /work/r13/venv/bin/python /work/r13/probe_load_back.py
"""

import copy
import functools
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from sglang.srt.runtime_context import publish
from sglang.srt.server_args import ServerArgs
from transformers import LlamaConfig

N, PS, PAGES_PER_RANK = 4, 4, 6


def publish_runtime():
    d = tempfile.mkdtemp(prefix="r13-tiny-")
    LlamaConfig(architectures=["LlamaForCausalLM"], hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
                max_position_embeddings=4096).save_pretrained(d)
    sa = ServerArgs(model_path=d, device="cpu", skip_tokenizer_init=True, page_size=PS,
                    enable_hierarchical_cache=True, hicache_ratio=2.0, hicache_write_policy="write_through",
                    hicache_io_backend="direct", hicache_mem_layout="layer_first")
    publish(sa, role="scheduler")
    return sa


SERVER_ARGS = publish_runtime()

import sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler as hpa  # noqa: E402
from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.page_interleave import PageInterleavePlacement, PageShardSpec  # noqa: E402
from sglang.srt.mem_cache.page_interleave_pool import PageInterleaveKVPoolMixin  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.mem_cache.unified_cache.components import ComponentType  # noqa: E402
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: E402

_real_host_cls = hpa.get_mha_host_pool_cls
hpa.get_mha_host_pool_cls = lambda info: functools.partial(_real_host_cls(info), pin_memory=False)  # STAND-IN


import sglang.srt.mem_cache.pool_host.mha as host_mha  # noqa: E402


def cpu_transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size):
    """STAND-IN for sgl_kernel transfer_kv_direct: row copies, every layer (K and V lists)."""
    for src, dst in zip(src_layers, dst_layers):
        dst[dst_indices.to(dst.device)] = src[src_indices.to(src.device)].to(dst.device)


host_mha.transfer_kv_direct = cpu_transfer_kv_direct


class CpuPageInterleaveMHAPool(PageInterleaveKVPoolMixin, MHATokenToKVPool):
    """STAND-IN for PageInterleaveMHATokenToKVPool: same bases and placement; no NCCL comm / scratch."""

    def __init__(self, *a, shard_spec, **kw):
        MHATokenToKVPool.__init__(self, *a, **kw)
        self.shard_spec = shard_spec
        self.placement = PageInterleavePlacement(shard_spec)
        self.shard_rank, self.shard_size = shard_spec.shard_rank, shard_spec.shard_size


def gloo_group():
    if not torch.distributed.is_initialized():
        path = os.path.join(tempfile.mkdtemp(prefix="r13-pg-"), "store")
        torch.distributed.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    return torch.distributed.group.WORLD


class Harness:
    def __init__(self):
        spec = PageShardSpec(shard_rank=0, shard_size=N, page_size=PS, max_prefix_tokens=N * PS * 4,
                             chunk_tokens=PS * 4)
        per_rank_slots = PAGES_PER_RANK * PS
        self.kv = CpuPageInterleaveMHAPool(N * (per_rank_slots + PS), page_size=PS, dtype=torch.float32,
                                           head_num=2, head_dim=4, layer_num=2, device="cpu",
                                           enable_memory_saver=False, enable_alt_stream=False, shard_spec=spec)
        self.alloc = PageInterleavePoolAllocator(per_rank_slots, PS, N, torch.int64, "cpu", self.kv, False)
        params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=self.alloc,
                                 page_size=PS, tp_cache_group=gloo_group(), eviction_policy="lru",
                                 tree_components=(ComponentType.FULL,), tree_core_backend="python")
        self.cache = UnifiedRadixCache(params)
        self.cache.init_hicache(SERVER_ARGS, params)
        self.cc = self.cache.cache_controller
        self.next_tok = 1000
        self.held = []
        # count upstream's eviction requests from _load_back_transfers (instance-level wrapper, counting only)
        self.evict_calls = []
        real = self.cache.evict_for_alloc

        def counting_evict_for_alloc(params, **kw):
            before = self.cache.full_evictable_size()
            res = real(params, **kw)
            self.evict_calls.append((params.num_tokens, res.num_tokens_evicted, before,
                                     self.cache.full_evictable_size()))
            return res

        self.cache.evict_for_alloc = counting_evict_for_alloc

    def settle(self):
        self.cc.start_writing()
        self.cache.writing_check()

    def chain(self, base, pages):
        idx = self.alloc.alloc_cyclic(start_class=base, need_size=pages * PS)
        assert idx is not None
        keys = list(range(self.next_tok, self.next_tok + pages * PS))
        self.next_tok += 10000
        self.cache.insert(InsertParams(key=RadixKey(keys), value=idx, rotation_base=base))
        self.settle()
        return keys, idx

    def owners(self, idx):
        return sorted(set((idx[::PS] // PS % N).tolist()))

    def hold(self, cls, pages):
        """Pages of one class held by running requests (not in the tree: not evictable)."""
        for _ in range(pages):
            got = self.alloc.alloc_cyclic(start_class=cls, need_size=PS)
            assert got is not None
            self.held.append(got)

    def state(self):
        return (f"class_free={self.alloc.class_free_page_counts()} available_size={self.alloc.available_size()} "
                f"full_evictable={self.cache.full_evictable_size()}")

    def dry_alloc_cyclic(self, start_class, tokens):
        a = copy.copy(self.alloc)
        a.class_free_pages = [t.clone() for t in self.alloc.class_free_pages]
        a.class_release_pages = [t.clone() for t in self.alloc.class_release_pages]
        got = a.alloc_cyclic(start_class=start_class, need_size=tokens)
        return None if got is None else self.owners(got)

    def host_node(self, keys):
        m = self.cache.match_prefix(MatchPrefixParams(key=RadixKey(keys)))
        assert m.host_hit_length == len(keys) and m.device_prefix_len == 0, m
        return m.last_host_node


def to_host(h, keys):
    """Evict a backed-up chain's device copy (the only evictable leaf at that time)."""
    r = h.cache.evict(EvictParams(num_tokens=len(keys)))
    assert r.num_tokens_evicted == len(keys), r
    return h.host_node(keys)


def load(h, node, label):
    host_idx = h.cache.tree_core.build_load_back_spec(node, req=None)[0].host_indices
    start = int(host_idx[0]) // PS
    print(f"  load needs {len(host_idx)} tokens, start_class={start % N}, per-class need="
          f"{PageInterleavePoolAllocator._class_counts(start % N, len(host_idx) // PS, N)}")
    print(f"  direct alloc_cyclic(start_class={start % N}) on a copy of the allocator now: "
          f"{'OK owners ' + str(h.dry_alloc_cyclic(start, len(host_idx))) if h.dry_alloc_cyclic(start, len(host_idx)) else 'None'}")
    print(f"  before: {h.state()}")
    h.evict_calls.clear()
    ok = h.cache.load_back(node)
    print(f"  upstream load_back -> {ok}")
    for need, got, ev_before, ev_after in h.evict_calls:
        print(f"  evict_for_alloc(num_tokens={need}) evicted {got} tokens (evictable {ev_before} -> {ev_after})")
    print(f"  after:  {h.state()}")
    if ok:
        h.cc.start_loading()
        h.cache.loading_check()
        print(f"  H2D done via real L2TransferEngine; load queue empty={len(h.cc.load_queue) == 0}")
    return ok, sum(c[1] for c in h.evict_calls)


def scenario_control():
    print("\n[C] control: nothing drained")
    h = Harness()
    x, _ = h.chain(1, 3)
    node = to_host(h, x)
    h.chain(1, 3)
    return load(h, node, "C")


def scenario_a():
    print("\n[A] class 0 drained by running requests, nothing of class 0 evictable;"
          " the load (3 pages from class 1: classes 1,2,3) never touches class 0")
    h = Harness()
    x, _ = h.chain(1, 3)
    node = to_host(h, x)
    for _ in range(2):
        _, idx = h.chain(1, 3)
        print(f"  evictable chain, owners {h.owners(idx)}")
    h.hold(0, h.alloc.class_free_page_counts()[0])
    return load(h, node, "A")


def scenario_b():
    print("\n[B] class 0 drained, one evictable class-0 page is the MOST recently used leaf;"
          " older leaves are classes 1-3")
    h = Harness()
    x, _ = h.chain(1, 3)
    node = to_host(h, x)
    for _ in range(2):
        _, idx = h.chain(1, 3)
        print(f"  older evictable chain, owners {h.owners(idx)}")
    _, idx = h.chain(0, 1)
    print(f"  newest evictable chain, owners {h.owners(idx)}")
    h.hold(0, h.alloc.class_free_page_counts()[0])
    return load(h, node, "B")


if __name__ == "__main__":
    print(f"torch {torch.__version__}; N={N} page_size={PS} pages_per_rank={PAGES_PER_RANK}")
    rc = scenario_control()
    ra = scenario_a()
    rb = scenario_b()
    print("\nSUMMARY (load_back result, tokens upstream evicted for it):")
    print(f"  control: {rc}   A: {ra}   B: {rb}")
    sys.stdout.flush()
