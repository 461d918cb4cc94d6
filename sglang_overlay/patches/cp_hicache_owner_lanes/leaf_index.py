"""The persistent lazy leaf heap the planner walks, and the set that feeds it.

Job: yield a cache's evictable device leaves in its eviction-priority order without rebuilding a heap
per plan: a leaf is pushed when upstream adds it to its leaf set (a :class:`NotifyingLeafSet` on patched
caches), a stale entry is dropped when it surfaces, an entry whose priority grew is re-pushed.
Invariant: exact for strategies whose priorities never decrease (:func:`is_monotone`); the planner builds
the full heap for the others. Cost: O(log n) per push or pop; rebuilt past 2 x leaves + ``COMPACT_SLACK``.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Sequence

# Strategies whose node priority never decreases over a node's life.
MONOTONE_STRATEGIES = ("LRUStrategy", "LFUStrategy", "FIFOStrategy", "PriorityStrategy", "SLRUStrategy")


def is_monotone(strategy) -> bool:
    return any(klass.__name__ in MONOTONE_STRATEGIES for klass in type(strategy).__mro__)


class NotifyingLeafSet(set):
    """Upstream's ``evictable_leaves`` set, telling the index about every ``add``.

    Installed on the caches the patch acts on (each release folder's ``state.py``); upstream
    adds leaves in one place (``_update_leaf_status``).
    """

    __slots__ = ("on_add",)

    def __init__(self, items=(), on_add=None):
        super().__init__(items)
        self.on_add = on_add

    def add(self, node) -> None:
        set.add(self, node)
        if self.on_add is not None:
            self.on_add(node)


class LeafOrderIndex:
    """Persistent lazy priority heap over a cache's evictable device leaves."""

    COMPACT_SLACK = 1024

    def __init__(self, evictable_leaves: set, get_priority: Callable, monotone: bool):
        self.leaves = evictable_leaves  # upstream's own set (shared, not copied)
        self.get_priority = get_priority
        self.monotone = monotone
        self._seq = itertools.count()
        self._heap: list = []
        self._queued: set = set()
        self.rebuild()

    def rebuild(self) -> None:
        self._heap = [(self.get_priority(n), next(self._seq), n) for n in self.leaves]
        heapq.heapify(self._heap)
        self._queued = set(self.leaves)

    def note(self, node) -> None:
        """Called when upstream adds ``node`` to ``evictable_leaves``."""
        if node in self._queued or node not in self.leaves:
            return
        heapq.heappush(self._heap, (self.get_priority(node), next(self._seq), node))
        self._queued.add(node)
        if len(self._heap) > 2 * len(self.leaves) + self.COMPACT_SLACK:
            self.rebuild()

    def __len__(self) -> int:
        return len(self._heap)

    def ordered(self, popped: list):
        """Yield evictable leaves in priority order; every yielded entry goes to ``popped``.

        The caller pushes back what it does not consume (:meth:`restore`), so an
        abandoned plan leaves the index as it found it (minus stale entries).
        """
        heap = self._heap
        get_priority = self.get_priority
        while heap:
            prio, seq, node = heap[0]
            if node not in self.leaves:
                heapq.heappop(heap)
                self._queued.discard(node)
                continue
            current = get_priority(node)
            if current != prio:
                heapq.heapreplace(heap, (current, next(self._seq), node))
                continue
            heapq.heappop(heap)
            popped.append((prio, seq, node))
            yield node

    def restore(self, entries: Sequence) -> None:
        for entry in entries:
            heapq.heappush(self._heap, entry)
