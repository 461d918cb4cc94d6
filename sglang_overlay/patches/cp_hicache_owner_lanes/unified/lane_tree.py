"""A 0.5.23 ``UnifiedRadixCache`` tree in the planner's terms (:class:`~..planner.LaneTree`), on upstream's nodes.

Job: lock, device and priority tests on upstream's ``UnifiedTreeNode`` directly, and each node's pages per lane
from upstream's ``rotation_base`` (the chain's base: position-page ``P`` of the chain is in lane
``(base + P) % N``) and the node's position (the tokens above it, as ``rotation_phase_of`` counts them).
Invariant: a node without a ``rotation_base`` reports None (the planner skips it); the memo lives for one plan
only (one :class:`UnifiedLaneTree` per plan), so nothing goes stale across tree changes.
Cost: per node read, one walk up to the nearest node whose position is already known, and one closed form.
"""

from __future__ import annotations

from typing import Optional, Tuple

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.upstream import full as _full

_UNKNOWN = object()


class UnifiedLaneTree:
    """One plan's reading of a ``UnifiedTreeCore`` (``num_lanes``: lanes, the allocator's shard size;
    ``page_size``: tokens per page; ``priority``: the cache's eviction-strategy priority of a node)."""

    __slots__ = ("root", "_core", "_priority", "num_lanes", "page_size", "_full", "_pages", "_above")

    def __init__(self, tree_core, priority, num_lanes: int, page_size: int):
        self.root = tree_core.root_node
        self._core = tree_core
        self._priority = priority
        self.num_lanes = num_lanes
        self.page_size = page_size
        self._full = _full()
        self._pages: dict = {}  # node -> pages per lane (None: no lane metadata), this plan only
        self._above: dict = {self.root: 0}  # node -> tokens on the path above it

    def leaves(self):
        return self._core.evictable_device_leaves

    def priority(self, node):
        return self._priority(node)

    def evictable(self, node) -> bool:
        data = node.component_data
        return data[self._full].value is not None and not any(cd.lock_ref > 0 for cd in data)

    def on_device(self, node) -> bool:
        return node.component_data[self._full].value is not None

    @staticmethod
    def parent(node):
        return node.parent

    @staticmethod
    def children(node):
        return node.children.values()

    def tokens_above(self, node) -> int:
        """Tokens on the path from the root down to ``node`` (exclusive), memoized for every node passed."""
        above = self._above
        pending = []
        cur = node
        while cur is not None and cur not in above:
            pending.append(cur)
            cur = cur.parent
        for x in reversed(pending):
            parent = x.parent
            above[x] = 0 if parent is None or parent is self.root else above[parent] + len(parent.key)
        return above[node]

    def first_lane(self, node) -> Optional[int]:
        """The lane of ``node``'s first page, or None when it carries no ``rotation_base``."""
        base = node.rotation_base
        if base is None or node is self.root:
            return None
        return (base + self.tokens_above(node) // self.page_size) % self.num_lanes

    def lane_pages(self, node) -> Optional[Tuple[int, ...]]:
        got = self._pages.get(node, _UNKNOWN)
        if got is _UNKNOWN:
            first = None if node.key is None else self.first_lane(node)
            got = None if first is None else md.run_lane_pages(first, len(node.key) // self.page_size, self.num_lanes)
            self._pages[node] = got
        return got
