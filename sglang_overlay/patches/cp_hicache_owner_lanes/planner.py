"""Owner-lane eviction planning on CPU metadata only: which evictable nodes cover every lane's deficit.

A *lane* is the set of KV pages one CP rank owns under the page-interleaved layout: logical page ``l`` is in lane
``l % N`` (upstream's ``PageInterleavePoolAllocator`` calls a lane an owner class and ``N`` its shard size).
Every count here is in pages (the allocator's physical page) and every vector is indexed by lane.

Job: walk evictable device nodes in the cache's eviction-priority order (through a
:class:`~.leaf_index.LeafOrderIndex` when priorities are monotone), take a node only if it frees a lane
still short (with its deferred descendants: child-then-parent chains), stop when covered, drop redundant
units. The tree is read through :class:`LaneTree`, on the release's own nodes (no per-plan view objects).

Invariant. Precondition: every evictable device node carries lane metadata (``LaneTree.lane_pages`` is not
None; on 0.5.23, upstream's ``rotation_base``). Under it the planner refuses (``LanePlan.covered`` false) only a
deficit no eviction could cover. A node without lane metadata is skipped: its pages are not counted, and as it
is neither taken nor deferred its parent never joins the walk; so where the precondition fails, an uncovered
plan proves only that no eviction of the nodes that carry metadata, and of the parents they reach, covers the
deficit (the capacity hook therefore hands an uncovered call to upstream's eviction; the load-back gate
refuses the load and evicts nothing). Always: Python attributes only (no tensor, no host-device
sync), nothing evicted, and nothing in the tree changed but the index's heap order.
Cost: the nodes it scans, each O(log scanned) plus one ``lane_pages`` (memoized per plan by the tree).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Protocol, Sequence

from sglang_overlay.patches.cp_hicache_owner_lanes.leaf_index import LeafOrderIndex


class LaneTree(Protocol):
    """What the planner reads of a radix tree, on the release's own node objects.

    Every count below is in pages (the allocator's physical page), indexed by lane (module docstring).
    """

    root: object

    def leaves(self) -> Iterable:
        """The evictable device leaves (read only when the priorities are not monotone: no index)."""

    def priority(self, node):
        """The eviction strategy's priority of ``node`` (lower goes first)."""

    def evictable(self, node) -> bool:
        """On device and unlocked."""

    def on_device(self, node) -> bool:
        """Holds device pages (locked or not)."""

    def parent(self, node):
        """``node``'s parent (None above the root)."""

    def children(self, node) -> Iterable:
        """``node``'s children."""

    def lane_pages(self, node) -> Optional[Sequence[int]]:
        """Pages ``node`` holds per lane; None when it carries no lane metadata (the walk skips it: the
        invariant's precondition)."""


@dataclass
class LanePlan:
    """Outcome of planning. Every vector is pages, one entry per lane."""

    need: List[int]  # pages per lane the caller must allocate
    free: List[int]  # pages per lane free before eviction
    deficit: List[int]  # pages per lane: max(0, need - free), before eviction
    leaves: list = field(default_factory=list)  # nodes to evict, in eviction order (children before parents)
    pages_per_lane: List[int] = field(default_factory=list)  # pages per lane the planned nodes free
    remaining: List[int] = field(default_factory=list)  # pages per lane of deficit left uncovered
    scanned: int = 0  # nodes the walk read (taken, deferred or skipped)
    # The index the walk read and the entries it popped from it: finish_plan hands them back.
    index: Optional["LeafOrderIndex"] = field(default=None, repr=False)
    popped: list = field(default_factory=list, repr=False)

    @property
    def covered(self) -> bool:
        return not any(self.remaining)


def plan_owner_lane_eviction(
    tree: LaneTree,
    need: Sequence[int],
    free: Sequence[int],
    index: Optional[LeafOrderIndex],
    num_lanes: int,
) -> LanePlan:
    """Plan the evictions that cover every lane deficit, or report what stays uncovered.

    The walk follows upstream's own eviction order: evictable leaves by
    priority, and a parent joins the walk (at its own priority, as upstream's
    ``_promote_parent`` does) once every device child has been taken or
    *deferred*. A node that frees a lane still short is taken, together with
    its deferred descendants (they must go first: a child-then-parent chain);
    a node that frees no short lane is deferred. So a lane page held by an
    interior node whose children free only other lanes is still reachable, and
    (every node carrying lane metadata: the module's precondition) the walk
    refuses only when every unlocked device node together cannot cover the
    deficits (lanes only ever leave the short set, so a deferred node can never
    become useful on its own).

    Bound (asserted against a brute-force optimum in the tests): after
    :func:`_prune` every *unit* (a planned node whose parent is not planned,
    with its planned descendants) is needed by some lane, so a plan holds at
    most ``D = sum(deficit)`` units and evicts at most ``D * M`` pages, with
    ``M`` the largest unit; the optimum evicts at least ``D`` pages, so the
    excess over it is at most ``D * (M - 1)``.

    Args:
        tree: the cache's tree (:class:`LaneTree`).
        need: pages per lane the caller must allocate.
        free: pages per lane free now.
        index: the cache's lazy leaf heap, or None (non-monotone priorities: a full heap is built).
        num_lanes: lanes (``N``), the length of ``need`` and ``free``.

    Pure CPU: reads the tree through ``tree`` only; mutates nothing but the
    index's heap order (entries it popped are handed back by the caller through
    :func:`finish_plan`). Cost: the nodes it scans, each O(log scanned).
    """
    deficit = [max(0, need[c] - free[c]) for c in range(num_lanes)]
    plan = LanePlan(list(need), list(free), deficit, pages_per_lane=[0] * num_lanes)
    plan.remaining = list(deficit)
    if not any(deficit):
        return plan

    popped: list = []
    if index is not None and index.monotone:
        stream = index.ordered(popped)
    else:
        priority = tree.priority
        full = [(priority(n), seq, n) for seq, n in enumerate(tree.leaves())]
        heapq.heapify(full)
        stream = (heapq.heappop(full)[2] for _ in range(len(full)))
    plan.popped = popped
    plan.index = index
    try:
        chosen = _walk(tree, plan, stream, num_lanes)
    except BaseException:
        if index is not None:
            index.restore(popped)  # leave the index whole for the next plan
        popped.clear()
        raise
    if plan.covered and len(plan.leaves) > 1:
        _prune(tree, plan, chosen, num_lanes)
    return plan


def _walk(tree: LaneTree, plan: LanePlan, stream, num_lanes: int) -> set:
    """The priority walk of :func:`plan_owner_lane_eviction`; fills ``plan``, returns the chosen set."""
    priority, lane_pages, children = tree.priority, tree.lane_pages, tree.children
    evictable, on_device, parent_of = tree.evictable, tree.on_device, tree.parent
    root = tree.root
    left = plan.remaining
    outstanding = sum(1 for d in left if d > 0)
    chosen: set = set()
    deferred: set = set()  # scanned, evictable, freeing no short lane (yet part of a chain)
    promoted: list = []  # local heap of parents whose device children are all taken or deferred
    seq = itertools.count()
    upcoming = next(stream, None)
    while outstanding:
        if promoted and (upcoming is None or promoted[0][0] <= priority(upcoming)):
            node = heapq.heappop(promoted)[2]
        elif upcoming is not None:
            node = upcoming
            upcoming = next(stream, None)
        else:
            break
        plan.scanned += 1
        if node in chosen or node in deferred or not evictable(node):
            continue
        counts = lane_pages(node)
        if counts is None:
            continue  # no lane metadata: cannot be counted without tensors (blocks its parent)
        if any(counts[c] and left[c] for c in range(num_lanes)):
            for x in _chain_below(tree, node, deferred) + [node]:
                chosen.add(x)
                plan.leaves.append(x)
                for c, pages in enumerate(lane_pages(x)):
                    plan.pages_per_lane[c] += pages
                    if left[c]:
                        left[c] = max(0, left[c] - pages)
                        outstanding -= left[c] == 0
        else:
            deferred.add(node)
        parent = parent_of(node)
        if parent is not root and parent is not None and on_device(parent):
            if all(not on_device(ch) or ch in chosen or ch in deferred for ch in children(parent)):
                heapq.heappush(promoted, (priority(parent), next(seq), parent))
    return chosen


def _chain_below(tree: LaneTree, node, deferred: set) -> list:
    """``node``'s deferred device descendants, children before parents (eviction order);
    they leave ``deferred``. Every device child of ``node`` is taken or deferred here."""
    out: list = []
    stack = [(child, False) for child in tree.children(node) if child in deferred]
    while stack:
        x, expanded = stack.pop()
        if expanded:
            deferred.discard(x)
            out.append(x)
            continue
        stack.append((x, True))
        stack.extend((child, False) for child in tree.children(x) if child in deferred)
    return out


def _prune(tree: LaneTree, plan: LanePlan, chosen: set, num_lanes: int) -> None:
    """Drop nodes a later pick made redundant, most valuable (latest taken) first.

    The walk takes a node when it frees a lane that is still short; a node taken
    later for another lane can cover that lane too. ``plan.leaves`` is in
    eviction order (children before parents), so walking it backwards decides a
    parent before its children: a node whose parent stays is kept (the parent
    can only go after it), any other node is dropped when every deficit stays
    covered without it. Afterwards every unit root is needed by some lane, which
    is what the planner's bound rests on. One pass suffices: dropping only
    lowers the totals, so a node found needed stays needed.
    """
    counts = {id(x): tree.lane_pages(x) for x in plan.leaves}
    total = list(plan.pages_per_lane)
    deficit = plan.deficit
    kept = []
    for leaf in reversed(plan.leaves):
        c = counts[id(leaf)]
        if tree.parent(leaf) not in chosen and all(total[lane] - c[lane] >= deficit[lane] for lane in range(num_lanes)):
            chosen.discard(leaf)
            for lane in range(num_lanes):
                total[lane] -= c[lane]
            continue
        kept.append(leaf)
    kept.reverse()
    plan.leaves = kept
    plan.pages_per_lane = total


def finish_plan(plan: LanePlan) -> None:
    """Hand back to the index every entry the plan popped.

    Entries of leaves that were evicted meanwhile are dropped lazily on a later
    walk (they are no longer in upstream's ``evictable_leaves``), so the same call
    serves an executed and an abandoned plan.
    """
    if plan.index is None or not plan.popped:
        return
    plan.index.restore(plan.popped)
    plan.popped.clear()
