"""Still needed? Upstream's HiCache load on a page-interleaved KV allocator, on sglang <0.5.23.

``probe()`` builds upstream's own ``PageInterleavePoolAllocator`` (N = 4 owner lanes, page 4, 6 free pages
per lane) and runs upstream's ``HiCacheController.load`` (unwrapped) for a 3-page host prefix, with a
controller that holds only that allocator and its load queue. ``HiRadixCache.load_back`` makes this call
for every host prefix, and again after its lane-blind ``evict(num_tokens)`` fallback. Upstream asks for a
bare ``alloc(12)``, which this allocator refuses with ``NotImplementedError`` although every lane has room.
So no host prefix ever comes back. The description's "When it can be dropped" is the load allocating
owner-classed pages, i.e. a run whose page owners cycle through the lanes: FIXED_UPSTREAM. A load that
returns nothing while every lane has room is still NEEDED.

Invariant: the controller is the probe's own namespace. No upstream module state is touched and nothing
is copied. Cost: importing upstream's cache controller (about 10 s on 2 cores), then one call.
"""

from __future__ import annotations

import traceback
from types import SimpleNamespace

from sglang_overlay.core.registry import FIXED_UPSTREAM, NEEDED, Finding

N, PS, PAGES, LOAD_PAGES = 4, 4, 6, 3  # owner lanes, tokens per page, pages per lane, pages to load


def probe() -> Finding:
    import torch
    from sglang.srt.managers.cache_controller import HiCacheController
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    alloc = PageInterleavePoolAllocator(PAGES * PS, PS, N, torch.int64, "cpu", None, False)
    lanes, avail = alloc.class_free_page_counts(), alloc.available_size()
    load = getattr(HiCacheController.load, "__wrapped__", HiCacheController.load)
    host_indices = torch.arange(N * PS, (N + LOAD_PAGES) * PS, dtype=torch.int64)
    controller = SimpleNamespace(mem_pool_device_allocator=alloc, load_queue=[])
    asked = f"HiCacheController.load of a {len(host_indices)}-token host prefix"
    try:
        got = load(controller, host_indices=host_indices, node_id=1)
    except NotImplementedError as exc:
        raiser = traceback.extract_tb(exc.__traceback__)[-1].name  # the allocator method that refused
        return Finding(NEEDED, f"{asked} calls PageInterleavePoolAllocator.{raiser}, which raises "
                       f"NotImplementedError although lane free pages are {lanes} (available_size() {avail}): "
                       "HiRadixCache.load_back can never bring a host prefix back")  # fmt: skip
    if got is None:
        return Finding(NEEDED, f"{asked} returns None (no pages) although lane free pages are {lanes} "
                       f"(available_size() {avail}): the prefix is re-prefilled")  # fmt: skip
    owners = (got[::PS] // PS % N).tolist()
    if all((owners[0] + j) % N == owner for j, owner in enumerate(owners)):
        return Finding(FIXED_UPSTREAM, f"{asked} allocates owner-classed pages on PageInterleavePoolAllocator "
                       f"(owners {owners}, cyclic)")  # fmt: skip
    return Finding(NEEDED, f"{asked} returns pages of owners {owners}, not one cyclic run of lanes")
