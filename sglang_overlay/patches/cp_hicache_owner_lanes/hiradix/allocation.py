"""The pages a ``HiRadixCache`` load-back needs: one cyclic run continuing the chain, drawn per owner class.

Job: :func:`chain_metas` puts the nodes to load on the resident ancestor's rotation (from the root: the
first node's own); :func:`alloc_owner_classed` draws that run through upstream's ``alloc_extend``.
Invariant: all or nothing (the allocator's own per-class supply check). Cost: two 1-element CPU tensors
and upstream's ``alloc_extend``; the run itself from Python attributes.
"""

from __future__ import annotations

from typing import Sequence

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import ensure_meta


def chain_metas(cache, state, ancestor, nodes_to_load) -> list:
    """Metadata the loaded pages must have: one cyclic run that continues the chain.

    Under a resident ancestor the run takes the ancestor's rotation base (its
    metadata tracks its real pages), so the request's whole chain stays on one
    rotation even when the host nodes were stored under another base (the prefix
    was recomputed on a different rotation while they sat on host). From the
    root the run keeps the first node's own base. Host-only: Python attributes.
    """
    metas = [ensure_meta(cache, state, n) for n in nodes_to_load]
    if ancestor is cache.root_node:
        base = metas[0].rotation_base
    else:
        base = ensure_meta(cache, state, ancestor).rotation_base
    n = state.shard_size
    return [
        m if m.rotation_base == base else md.CpHiCacheNodeMetadata.for_chain(n, base, m.start_page, m.num_pages)
        for m in metas
    ]


def alloc_owner_classed(allocator, metas: Sequence, last_loc=None):
    """Device indices for ``metas``' pages, each page from its owner class; None if short.

    ``metas`` is one cyclic run (:func:`chain_metas`). Goes through upstream's
    ``alloc_extend`` as one "request": the run's rotation base as its base and
    its first position-page as its prefix, so the allocator's own per-class
    supply check makes it all or nothing. ``last_loc`` is the real device slot
    right before the run (the resident ancestor's last slot, a 1-element view:
    no sync); upstream reads it only in its debug congruence check, which then
    compares the run's base against the real pages, not against the metadata.
    """
    import torch

    first, ps = metas[0], allocator.page_size
    num_pages = 0
    for meta in metas:
        assert meta.start_page == first.start_page + num_pages, "load-back nodes are not one path"
        assert meta.rotation_base == first.rotation_base, "load-back run spans two rotations"
        num_pages += meta.num_pages
    prefix = torch.tensor([first.start_page * ps], dtype=torch.int64)
    seq = torch.tensor([(first.start_page + num_pages) * ps], dtype=torch.int64)
    if last_loc is None:
        last_loc = torch.zeros(1, dtype=torch.int64)  # a run from the root: never read
    return allocator.alloc_extend(
        prefix, prefix, seq, seq, last_loc, num_pages * ps, rotation_bases=[first.rotation_base]
    )
