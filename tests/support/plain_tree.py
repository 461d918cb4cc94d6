"""STAND-IN radix tree for the owner-lane planner: plain Python nodes, no cache class of any release.

Job: give ``planner.plan_owner_lane_eviction`` what it reads (``planner.LaneTree``: the root, the evictable
leaves, priorities, per node its lock and device state, parent, children and pages per lane from its lane
metadata) so the planner's semantics are tested apart from any release's cache class. Nothing here is
upstream's tree: :class:`PlainTree` copies the few rules of upstream's ``HiRadixCache`` (the tree design before
0.5.23) the planner depends on (a node is an evictable leaf when it is
on device, unlocked and has no device child; a lock runs up to the root; an access bumps the path's
``last_access_time``; a split makes a fresh prefix node; matched nodes of an insert gain a hit, and so
does a new node, as write-through does) on a logical clock (no two accesses tie). Metadata is stamped
as the patch does: a chain from the root at its rotation base, anything below continues its parent.
The one upstream piece used is the eviction strategies (``sglang.srt.mem_cache.evict_policy``, the same
classes the release's cache uses), so priorities and the leaf index's monotone test are upstream's.
Invariant: ``evictable_leaves`` is always exactly upstream's rule over the current tree.
Cost: O(path) per insert, match or lock; no tensor anywhere (a node's ``value`` is its key, or None).
"""

from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Sequence, Tuple

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md

POLICIES = {
    "lru": "LRUStrategy",
    "lfu": "LFUStrategy",
    "fifo": "FIFOStrategy",
    "mru": "MRUStrategy",
    "filo": "FILOStrategy",
    "priority": "PriorityStrategy",
    "slru": "SLRUStrategy",
}


def strategy(policy: str):
    """Upstream's eviction strategy for ``policy``."""
    from sglang.srt.mem_cache import evict_policy

    return getattr(evict_policy, POLICIES[policy])()


class PlainNode:
    """A tree node: one run of pages (``key``, one token per page) and what priorities read."""

    def __init__(self, key: Tuple[int, ...], parent: Optional["PlainNode"], now: int):
        self.key = key
        self.parent = parent
        self.children: Dict[int, PlainNode] = {}  # first page of the child -> child
        self.value: Optional[tuple] = key  # non-None while on device (the planner only compares with None)
        self.lock_ref = 0
        self.last_access_time = now
        self.creation_time = now
        self.hit_count = 0
        self.priority = 0
        setattr(self, md.ATTR, None)

    @property
    def evicted(self) -> bool:
        return self.value is None

    def __repr__(self) -> str:
        return f"PlainNode(key={self.key}, lock_ref={self.lock_ref}, evicted={self.evicted})"


class PlainTree:
    """The cache as the planner reads it, with the tree rules listed in the module docstring."""

    def __init__(self, num_lanes: int, policy: str = "lru"):
        self.num_lanes = num_lanes
        self._clock = itertools.count(1)
        self.root_node = PlainNode((), None, 0)
        self.root_node.lock_ref = 1  # as upstream: the root is never evictable
        self.evictable_leaves: set = set()
        self.eviction_strategy = strategy(policy)

    def now(self) -> int:
        return next(self._clock)

    # -- the planner's LaneTree -----------------------------------------------------

    @property
    def root(self) -> PlainNode:
        return self.root_node

    def leaves(self):
        return self.evictable_leaves

    def priority(self, node: PlainNode):
        return self.eviction_strategy.get_priority(node)

    @staticmethod
    def evictable(node: PlainNode) -> bool:
        return node.lock_ref == 0 and node.value is not None

    @staticmethod
    def on_device(node: PlainNode) -> bool:
        return node.value is not None

    @staticmethod
    def parent(node: PlainNode):
        return node.parent

    @staticmethod
    def children(node: PlainNode):
        return node.children.values()

    def lane_pages(self, node: PlainNode):
        meta = md.get(node)
        return None if meta is None else meta.owner_counts(self.num_lanes)

    def lane_need(self, nodes: Sequence[PlainNode]) -> List[int]:
        """Pages per lane a load of ``nodes`` needs, summed from their metadata."""
        need = [0] * self.num_lanes
        for node in nodes:
            for lane, pages in enumerate(self.lane_pages(node)):
                need[lane] += pages
        return need

    # -- upstream's rules -----------------------------------------------------------

    def _update_leaf_status(self, node: PlainNode) -> None:
        leaf = not node.evicted and node.lock_ref == 0 and all(ch.evicted for ch in node.children.values())
        if leaf and node not in self.evictable_leaves:
            self.evictable_leaves.add(node)
        elif not leaf:
            self.evictable_leaves.discard(node)

    def _split(self, child: PlainNode, at: int) -> PlainNode:
        """``child`` becomes ``prefix -> child``; the prefix is a fresh node (new times), as upstream's."""
        prefix = PlainNode(child.key[:at], child.parent, self.now())
        prefix.lock_ref, prefix.hit_count, prefix.priority = child.lock_ref, child.hit_count, child.priority
        if child.evicted:
            prefix.value = None
        meta = md.get(child)
        if meta is not None:
            left, right = meta.split(at)
            md.put(prefix, left)
            md.put(child, right)
        child.parent.children[child.key[0]] = prefix
        child.key = child.key[at:]
        if not child.evicted:
            child.value = child.key
        prefix.children = {child.key[0]: child}
        child.parent = prefix
        return prefix

    def match(self, pages: Sequence[int]) -> PlainNode:
        """Upstream's match: bump ``last_access_time`` along the path, split at a partial match."""
        node, pages = self.root_node, tuple(pages)
        node.last_access_time = self.now()
        while pages and pages[0] in node.children:
            child = node.children[pages[0]]
            child.last_access_time = self.now()
            common = _common(child.key, pages)
            if common < len(child.key):
                return self._split(child, common)
            node, pages = child, pages[common:]
        return node

    def insert(self, pages: Sequence[int], rotation_base: int = 0) -> PlainNode:
        """Upstream's insert (matched nodes gain a hit, a partial match splits, the rest is one new
        node that gains a hit); the new node continues its parent's chain, or starts one at
        ``rotation_base`` under the root. Returns the path's last node."""
        node, pages = self.root_node, tuple(pages)
        while pages and pages[0] in node.children:
            node = node.children[pages[0]]
            node.last_access_time = self.now()
            common = _common(node.key, pages)
            if common < len(node.key):
                node = self._split(node, common)
            if node.evicted:
                node.value = node.key
                self._update_leaf_status(node)
                self._update_leaf_status(node.parent)
            else:
                node.hit_count += 1
            pages = pages[common:]
        if pages:
            new = PlainNode(pages, node, self.now())
            parent_meta = md.get(node)
            if parent_meta is None:
                md.put(new, md.CpHiCacheNodeMetadata.for_chain(self.num_lanes, rotation_base, 0, len(pages)))
            else:
                md.put(new, parent_meta.continuation(len(pages)))
            node.children[pages[0]] = new
            self._update_leaf_status(node)
            self._update_leaf_status(new)
            new.hit_count += 1
            node = new
        return node

    def inc_lock_ref(self, node: PlainNode) -> None:
        while node is not self.root_node:
            node.lock_ref += 1
            self._update_leaf_status(node)
            node = node.parent

    def dec_lock_ref(self, node: PlainNode) -> None:
        while node is not self.root_node:
            node.lock_ref -= 1
            self._update_leaf_status(node)
            node = node.parent

    def evict(self, node: PlainNode) -> None:
        """Drop ``node``'s device copy (it stays in the tree, as a host-backed node does)."""
        assert node in self.evictable_leaves, "only an evictable leaf goes"
        node.value = None
        self.evictable_leaves.discard(node)
        self._update_leaf_status(node.parent)

    # -- reading ----------------------------------------------------------------------

    def nodes(self) -> List[PlainNode]:
        stack, out = [self.root_node], []
        while stack:
            x = stack.pop()
            if x is not self.root_node:
                out.append(x)
            stack.extend(x.children.values())
        return out

    def path(self, pages: Sequence[int]) -> List[PlainNode]:
        """The nodes on ``pages``' path (no split, no access)."""
        node, pages, out = self.root_node, tuple(pages), []
        while pages and pages[0] in node.children:
            child = node.children[pages[0]]
            if _common(child.key, pages) < len(child.key):
                break
            out.append(child)
            node, pages = child, pages[len(child.key) :]
        return out


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


def leaf_index(tree: PlainTree):
    """Install the patch's leaf index on ``tree`` (a notifying leaf set, as the patch's state does)."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.leaf_index import (
        LeafOrderIndex,
        NotifyingLeafSet,
        is_monotone,
    )

    leaves = NotifyingLeafSet(tree.evictable_leaves)
    tree.evictable_leaves = leaves
    index = LeafOrderIndex(leaves, tree.eviction_strategy.get_priority, is_monotone(tree.eviction_strategy))
    leaves.on_add = index.note
    return index


def build_tree(n: int, chains: Sequence[Tuple[int, int, int, int]], touches=(), locks=(), policy: str = "lru"):
    """A :class:`PlainTree` holding ``chains``: grown from a list of chain specs.

    Each chain is ``(parent, cut, pages, base)``: ``parent`` -1 starts a new chain from the root with
    rotation base ``base``; otherwise it extends the first ``cut`` pages (clamped) of chain
    ``parent % len(so_far)``. The prefix is matched first (as a request's ``match_prefix`` would), then
    the whole chain inserted. ``touches`` re-match chains, ``locks`` lock a chain's last node.
    Returns (tree, page lists of the chains, locked nodes); the tree carries its leaf ``index``.
    """
    tree = PlainTree(n, policy)
    tree.index = leaf_index(tree)
    tokens: List[List[int]] = []
    fresh = itertools.count(1)
    for parent, cut, pages, base in chains:
        if parent < 0 or not tokens:
            prefix, b = [], base % n
        else:
            ptoks = tokens[parent % len(tokens)]
            prefix = ptoks[: max(1, min(cut, len(ptoks)))]
            tree.match(prefix)
            b = 0  # unused: the chain continues its parent's rotation
        toks = prefix + [next(fresh) * 1000 + len(tokens) for _ in range(pages)]
        tree.insert(toks, b)
        tokens.append(toks)
    for i in touches:
        if tokens:
            tree.match(tokens[i % len(tokens)])
    locked = []
    for i in locks:
        if tokens:
            node = tree.path(tokens[i % len(tokens)])[-1]
            tree.inc_lock_ref(node)
            locked.append(node)
    return tree, tokens, locked
