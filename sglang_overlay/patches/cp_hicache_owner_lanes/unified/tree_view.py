"""A 0.5.23 tree in the planner's terms: nodes with owner metadata, priorities, an index of views.

Job: :class:`TreeView` (one per plan) gives the planner ``root_node``, ``evictable_leaves`` and
``eviction_strategy`` as views; :class:`NodeView` builds a node's metadata from upstream's ``rotation_base``
and its position (None without a base: the planner skips it). Invariant: views are memoized for one plan
only, so nothing goes stale. Cost: one view per node the plan reads, ancestors created top-down.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.leaf_index import LeafOrderIndex
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.upstream import full as _full


class NodeView:
    """A 0.5.23 tree node under the attribute names the planner reads.

    ``lock_ref`` is the largest component lock (upstream's device-leaf test locks on
    any), ``value`` the Full device value (compared with None only), and the owner
    metadata (``md.ATTR``) is built from upstream's ``rotation_base`` and the node's
    position: ``None`` when the node carries no base (the planner then skips it).
    """

    __slots__ = ("node", "tree", "prefix_tokens", md.ATTR)

    def __init__(self, node, tree: "TreeView", prefix_tokens: int):
        self.node = node
        self.tree = tree
        self.prefix_tokens = prefix_tokens
        base = node.rotation_base
        meta = None
        if base is not None and node.key is not None and node is not tree.root:
            ps, n = tree.page_size, tree.shard_size
            start_page = prefix_tokens // ps
            meta = md.CpHiCacheNodeMetadata(n, (base + start_page) % n, start_page, len(node.key) // ps)
        setattr(self, md.ATTR, meta)

    @property
    def lock_ref(self) -> int:
        return max(cd.lock_ref for cd in self.node.component_data)

    @property
    def value(self):
        return self.node.component_data[_full()].value

    @property
    def parent(self) -> Optional["NodeView"]:
        parent = self.node.parent
        return None if parent is None else self.tree.view(parent)

    @property
    def children(self) -> dict:
        view = self.tree.view
        return {key: view(child) for key, child in self.node.children.items()}


class TreeView:
    """The cache as the planner reads it: root, priority, evictable leaves, all as views.

    One per plan (views are memoized for its duration only, so nothing goes stale).
    """

    def __init__(self, tree_core, priority, shard_size: int, page_size: int):
        self.tree_core = tree_core
        self.root = tree_core.root_node
        self.shard_size = shard_size
        self.page_size = page_size
        self._views: dict = {}
        self.root_node = self.view(self.root)
        self.eviction_strategy = _ViewPriority(priority)

    def view(self, node) -> NodeView:
        views = self._views
        got = views.get(node)
        if got is not None:
            return got
        # Create the missing ancestors top-down: a node's position is its parent's plus the parent's length.
        pending = []
        cur = node
        while cur is not None and cur not in views:
            pending.append(cur)
            cur = cur.parent
        for x in reversed(pending):
            parent = views.get(x.parent) if x.parent is not None else None
            prefix = 0 if parent is None else parent.prefix_tokens + (0 if x.parent is self.root else len(x.parent.key))
            views[x] = NodeView(x, self, prefix)
        return views[node]

    @property
    def evictable_leaves(self) -> List[NodeView]:
        return [self.view(n) for n in self.tree_core.evictable_device_leaves]


class _ViewPriority:
    __slots__ = ("get_node_priority",)

    def __init__(self, priority):
        self.get_node_priority = priority

    def get_priority(self, view: NodeView):
        return self.get_node_priority(view.node)


class ViewIndex:
    """A :class:`LeafOrderIndex` yielding views (the planner's duck-typed index)."""

    monotone = True

    def __init__(self, index: LeafOrderIndex, tree: TreeView):
        self.index = index
        self.tree = tree

    def ordered(self, popped: list):
        view = self.tree.view
        return (view(node) for node in self.index.ordered(popped))

    def restore(self, entries: Sequence) -> None:
        self.index.restore(entries)
