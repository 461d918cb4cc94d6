"""Brute-force oracles of the load-back gate's tests on sglang 0.5.23: what upstream's allocator would draw per
owner lane for a load, and what a load actually drew (read off the device indices); and the one short-lane
scenario several modules load back (``short_lane_2``).

Invariant: read from upstream's own code and tensors only (``PageInterleavePoolAllocator._class_counts``,
upstream's load-back spec, the loaded nodes' values), never from the patch's planner. Cost: one spec build or
one read of a node's indices per call (they read tensors: oracles, never the code under test).
"""

from __future__ import annotations

import torch


def run_lane_pages(start, pages, n):
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    return PageInterleavePoolAllocator._class_counts(start % n, pages, n)


def upstream_need(h, node_id):
    """Upstream's own per-lane draw for a load: alloc_cyclic from the first host page's owner."""
    host = h.load_spec(node_id).host_indices
    return run_lane_pages(int(host[0]) // h.ps, len(host) // h.ps, h.n)


def loaded_lanes(h, node_ids):
    """Brute force: pages per lane of the device indices the load actually allocated."""
    nodes = [h.tree.node_by_id(i) for i in node_ids]
    return h.lanes_of(torch.cat([x.component_data[0].value for x in nodes]))


def short_lane_2(h) -> int:
    """A 4-page host chain (one page a lane) to load back, one page of lane 2 free too few: its node id."""
    keys, _ = h.chain(0, 4)
    node = h.to_host(keys)
    for lane in (0, 1, 2, 3, 2):
        h.chain(lane, 1)
    for lane, pages in enumerate(h.alloc.class_free_page_counts()):
        h.hold(lane, pages - (0 if lane == 2 else 1))
    assert h.alloc.class_free_page_counts() == [1, 1, 0, 1]
    return node
