"""Owner metadata kept on ``HiRadixCache`` nodes: stamped on insert, split with the node, read as the base.

Job: AROUND ``insert`` (stamps created nodes and evicted nodes it re-points at the request's pages, from
``InsertParams.rotation_base`` or the request's ``kv_rotation_base`` carried by ``cache_*_req``),
``_split_node`` (splits the metadata), ``rotation_base_of`` (answers the chain's base from it).
Invariant: on a cache that is not page-interleaved every hook calls upstream's original unchanged.
Cost: one walk of the key's path before an insert, one walk of the new tail after it.
"""

from __future__ import annotations

import contextvars

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix.state import ensure_meta, state_of

_REQ_ROTATION_BASE: contextvars.ContextVar = contextvars.ContextVar("cp_owner_lane_req_base", default=None)


def _aligned_view(cache, key):
    """The key as upstream's insert/match sees it, without mutating the caller's key."""
    from sglang.srt.mem_cache.radix_cache import RadixKey

    view = RadixKey(
        key.token_ids,
        key.extra_key,
        is_bigram=key.is_bigram or cache.is_eagle,
        limit=key.limit,
        cache_salt=key.cache_salt,
    )
    return view.page_aligned(cache.page_size)


def _walk(cache, key, node=None, offset=0):
    """(node, start token, matched tokens) along ``key``'s path, as upstream walks it,
    optionally resuming at ``node`` (which covers the key up to ``offset``)."""
    ps = cache.page_size
    node = cache.root_node if node is None else node
    klen = len(key)
    while klen - offset >= ps:
        child = node.children.get(key.child_key_at(offset, ps))
        if child is None:
            return
        matched = child.key.match_at(key, offset, page_size=ps)
        if matched == 0:
            return
        yield child, offset, matched
        if matched < len(child.key):
            return
        node = child
        offset += matched


def insert_hook(original, self, params):
    state = state_of(self)
    if state is None or params.key is None:
        return original(self, params)
    key = _aligned_view(self, params.key)
    before = [(x, t, m, m == len(x.key), x.value is None) for x, t, m in _walk(self, key)]
    result = original(self, params)
    base = params.rotation_base
    if base is None:
        base = _REQ_ROTATION_BASE.get()
    _stamp(self, state, key, base, before)
    return result


def _stamp(cache, state, key, base, before) -> None:
    """Stamp what the insert changed: evicted nodes it re-pointed at the request's
    pages (re-stamped from ``base``) and the nodes it created past the old path.
    Costs one walk over the new tail only; the old path is known from ``before``."""
    ps, n = state.page_size, state.shard_size
    resume, resume_at = None, 0
    for node, start, matched, full, was_evicted in before:
        if full:
            resume, resume_at = node, start + matched
        if not was_evicted or base is None:
            continue
        # A partially matched node was split by the insert: its prefix is the new parent.
        target = node if full else node.parent
        if target.value is not None:
            md.put(target, md.CpHiCacheNodeMetadata.for_chain(n, base, start // ps, len(target.key) // ps))
    parent_meta = md.get(resume) if resume is not None else None
    for node, start, matched in _walk(cache, key, resume, resume_at):
        pages = len(node.key) // ps
        start_page = start // ps
        meta = md.get(node)
        if meta is None or meta.start_page != start_page or meta.num_pages != pages:
            if base is not None:
                phase = (base + start_page) % n
            elif parent_meta is not None:
                phase = parent_meta.next_owner
            elif node.parent is not cache.root_node:
                phase = ensure_meta(cache, state, node.parent).next_owner
            else:
                phase = state.allocator.least_full_class()  # new chain without a base
            meta = md.CpHiCacheNodeMetadata(n, phase, start_page, pages)
            md.put(node, meta)
        parent_meta = meta
        if matched < len(node.key):
            return


def split_node_hook(original, self, key, child, split_len):
    state = state_of(self)
    meta = md.get(child) if state is not None else None
    new_node = original(self, key, child, split_len)
    if meta is not None:
        left, right = meta.split(split_len // state.page_size)
        md.put(new_node, left)
        md.put(child, right)
    return new_node


def rotation_base_of_hook(original, self, node):
    from sglang.srt.mem_cache.radix_cache import TreeNode

    if isinstance(node, TreeNode) and node is not getattr(self, "root_node", None):
        state = state_of(self) if "evictable_leaves" in self.__dict__ else None
        if state is not None:
            return ensure_meta(self, state, node).rotation_base
    return original(self, node)


def _with_request_base(original, self, req, *args, **kwargs):
    if state_of(self) is None:
        return original(self, req, *args, **kwargs)
    token = _REQ_ROTATION_BASE.set(getattr(req, "kv_rotation_base", None))
    try:
        return original(self, req, *args, **kwargs)
    finally:
        _REQ_ROTATION_BASE.reset(token)


def cache_finished_req_hook(original, self, req, *args, **kwargs):
    return _with_request_base(original, self, req, *args, **kwargs)


def cache_unfinished_req_hook(original, self, req, *args, **kwargs):
    return _with_request_base(original, self, req, *args, **kwargs)
