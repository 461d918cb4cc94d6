"""cp-hicache-owner-lanes on sglang 0.5.23: HiCache load-back admission per owner lane.

Model. Under logical-page KV sharding (``--enable-kv-cache-sharding``) logical page
``l`` belongs to owner lane ``l % N``. On 0.5.23 a load-back draws its pages with
``alloc_cyclic(start_class=s, K pages)`` (``HybridCacheController.load``), which
takes ``_class_counts(s % N, K, N)`` pages from each lane, ``s`` being the owner of
the first host page; host slots were drawn at ``rotation_phase_of`` of the node
they back up, so ``s % N`` is the rotation phase of the topmost node to load.
Upstream's admission gate in ``UnifiedRadixCache._load_back_transfers`` asks
``available_size()`` instead (``N * page_size * min(free pages per lane)``) and
fills it with lane-blind LRU ``evict_for_alloc``: it evicts for lanes the load does
not use, and when the tightest lane has nothing evictable it empties the evictable
tree and still refuses.

What this hook does (AROUND ``UnifiedRadixCache._load_back_transfers``), only on a
cache whose Full allocator is a ``PageInterleavePoolAllocator`` (anything else: the
original runs unchanged). For the duration of the one call it stands in for
upstream's gate, at the point where upstream consults it (after the spec, the
threshold and quota checks, which stay upstream's):

1. need per lane = ``_class_counts(phase % N, pages, N)`` of the evicted segment
   above ``node_id`` (phase: upstream's ``rotation_base`` plus the node's first
   position-page, i.e. ``UnifiedTreeCore.rotation_phase_of``); free per lane =
   ``class_free_page_counts()``; deficit = need - free;
2. plans with the patch's planner (:func:`.planner.plan_owner_lane_eviction`,
   read through :class:`TreeView`, a view of 0.5.23's tree in the planner's terms):
   only units that hold a page of a short lane are taken, a deferred child goes
   with its parent (child-then-parent), lane supply of a node is
   ``_class_counts(phase % N, its pages, N)``;
3. a covering plan is executed through upstream's own primitives, as its
   ``_evict_components`` does (``_evict_device_leaf``; on write-back
   ``_execute_and_commit_kv_backup`` then ``_demote``, or ``_drop_subtree_no_host``),
   and the gate reports room for the load, so upstream's own ``cache_controller.load``
   (``alloc_cyclic``), commit and lock bookkeeping follow;
4. a deficit no eviction can cover evicts nothing: the gate reports upstream's own
   availability and answers upstream's ``evict_for_alloc`` with an empty result, so
   upstream's refusal path releases the locks and returns ``False``.

Invariants: nothing is evicted unless the plan covers every deficit; every planned
unit holds a page of a short lane (pages of other lanes go only as co-residents of
such units); the planner reads Python attributes only (no tensor, so no host-device
sync); ``_component_available_size`` and ``evict_for_alloc`` are shadowed on the
instance for this one call only, and restored even when the call raises. Locks:
``load_back`` has locked the path (device ancestors and the evicted segment), so the
plan never touches it.

Cost: when no lane is short, one walk from the load node to the root (the evicted
segment and the top node's position) and N free counts (``len()`` of the allocator's
per-lane free tensors: shape reads, no sync). Otherwise add the planner's cost (the
nodes it scans, each O(log scanned)) over a persistent lazy leaf heap
(:class:`.planner.LeafOrderIndex` on upstream's ``evictable_device_leaves``, which is
replaced by a :class:`.planner.NotifyingLeafSet`, one set lookup per upstream ``add``;
rebuilt after ``reset()`` rebinds the set) and the evictions themselves. Not handled
(the original runs, with one warning per cache): tree components besides FULL and the
Rust tree core (``--enable-kv-cache-sharding`` forces the Python one). Logging: nothing per
call; one warning when planning is slower than ``SGLANG_OVERLAY_OWNER_LANE_SLOW_PLAN_MS``,
when an executed plan freed less than planned or the load still failed after it
(both: a bug or an accounting change upstream), and once per cache when the patch
cannot act on a page-interleaved cache. Refusals are counted
(:func:`.counters.counters_of`), logged at debug level: under memory pressure they
are routine and upstream refuses silently too.

Usage (the declaration; SGLang's HookRegistry calls the hook with the original)::

    Target("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache._load_back_transfers",
           "sglang_overlay.patches.cp_hicache_owner_lanes.v0_5_23:load_back_transfers_hook", "AROUND",
           upstream=">=0.5.23")

Exit condition: drop when upstream's load-back gate plans eviction per owner lane
(``_load_back_transfers`` stops gating on ``available_size()``).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import List, Optional, Sequence, Tuple

from sglang_overlay.patches.cp_hicache_owner_lanes import counters as ctr
from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes import settings
from sglang_overlay.patches.cp_hicache_owner_lanes.counters import OwnerLaneCounters
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import (
    LeafOrderIndex,
    NotifyingLeafSet,
    finish_plan,
    is_monotone,
    plan_owner_lane_eviction,
)

logger = logging.getLogger("sglang_overlay.patches.cp_hicache_owner_lanes")



@functools.lru_cache(maxsize=None)
def _full():
    """Upstream's ``ComponentType.FULL``, imported on first use: importing this module imports no upstream."""
    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    return ComponentType.FULL


STATE_ATTR = "_cp_owner_lanes"  # as on 0.5.20, so counters.counters_of(cache) reads both
_INERT = False  # cached "patch does not act on this cache" marker
_MISSING = object()


def load_back_transfers_hook(original, self, *args, **kwargs):
    """AROUND ``UnifiedRadixCache._load_back_transfers`` (keyword-only upstream)."""
    state = state_of(self)
    if state is None:
        return original(self, *args, **kwargs)
    gate = LaneGate(self, state, kwargs["node_id"])
    with gate:
        loaded = original(self, *args, **kwargs)
    gate.account(loaded)
    return loaded


# --------------------------------------------------------------------------- per-cache state


class LaneState:
    """What the hook keeps per page-interleaved cache: allocator, leaf index, counters."""

    def __init__(self, cache, allocator: "PageInterleavePoolAllocator"):
        self.allocator = allocator
        self.shard_size = allocator.shard_size
        self.page_size = allocator.page_size  # the physical page: the tree's quantum
        full = cache.tree_core.components_by_type[_full()]
        full._ensure_eviction_strategy()
        # Upstream's Full walk orders leaves by this (session-aware when sessions are on).
        self.priority = full.session_ref_eviction_strategy
        self.monotone = not cache.enable_session_radix_cache and is_monotone(cache.tree_core.eviction_strategy)
        self.counters = OwnerLaneCounters(self.shard_size)
        if getattr(cache, "metrics_collector", None) is not None:
            self.counters.bind_collector(cache.metrics_collector)
        self.slow_plan_ms = settings.slow_plan_ms()
        self._leaves = None
        self._index: Optional[LeafOrderIndex] = None

    def leaf_index(self, tree_core) -> Optional[LeafOrderIndex]:
        """The lazy heap over upstream's device-leaf set (None: non-monotone priorities)."""
        if not self.monotone:
            return None
        leaves = tree_core.evictable_device_leaves
        if leaves is not self._leaves:  # first plan, or reset() rebound the set
            if not isinstance(leaves, NotifyingLeafSet):
                leaves = NotifyingLeafSet(leaves)
                tree_core.evictable_device_leaves = leaves
            self._index = LeafOrderIndex(leaves, self.priority, True)
            leaves.on_add = self._index.note
            self._leaves = leaves
        return self._index


def state_of(cache) -> Optional[LaneState]:
    """The cache's state, created on first use; None when the patch does not act on it."""
    state = cache.__dict__.get(STATE_ATTR)
    if state is not None:
        return state or None
    allocator = cache.token_to_kv_pool_allocator
    allocator = getattr(allocator, "full_attn_allocator", allocator)  # what the controller's load uses
    state = _INERT
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    if isinstance(allocator, PageInterleavePoolAllocator):
        reason = _unsupported(cache)
        if reason is None:
            state = LaneState(cache, allocator)
        else:
            logger.warning(
                "owner-lane load-back inactive on this page-interleaved cache (%s): upstream's "
                "lane-blind load-back gate applies", reason,
            )
    cache.__dict__[STATE_ATTR] = state
    return state or None


def _unsupported(cache) -> Optional[str]:
    tree_core = cache.tree_core
    if not hasattr(tree_core, "evictable_device_leaves") or not hasattr(tree_core, "node_by_id"):
        return f"tree core {type(tree_core).__name__} is not the Python UnifiedTreeCore"
    if tuple(cache.tree_components) != (_full(),):
        return f"tree components {[ct.name for ct in cache.tree_components]}: only FULL is planned"
    return None


# --------------------------------------------------------------------------- the planner's view of the tree


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
            prefix = 0 if parent is None else parent.prefix_tokens + (
                0 if x.parent is self.root else len(x.parent.key)
            )
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


class _ViewIndex:
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


# --------------------------------------------------------------------------- need, plan, execution


def evicted_segment(tree_core, node_id) -> list:
    """The nodes a load-back of ``node_id`` brings back, top-first (upstream's walk)."""
    nodes = []
    cur = tree_core.node_by_id(node_id)
    while cur.evicted:
        nodes.append(cur)
        cur = cur.parent
    nodes.reverse()
    return nodes


def lane_need(tree: TreeView, segment: Sequence) -> Tuple[int, List[int]]:
    """Tokens and pages per lane that ``alloc_cyclic`` draws for loading ``segment``.

    The start lane is the top node's rotation phase (its host slots were drawn at
    it). A top node without a rotation base (an insert path that carried none) falls
    back to the owner of its first host slot: one read of a CPU tensor, the read
    upstream's ``load`` makes anyway.
    """
    n, ps = tree.shard_size, tree.page_size
    tokens = sum(len(x.key) for x in segment)
    if not segment:
        return 0, [0] * n
    meta = md.get(tree.view(segment[0]))
    if meta is not None:
        start = meta.first_owner
    else:
        start = int(segment[0].component_data[_full()].host_value[0]) // ps % n
    return tokens, list(md.class_counts(start, -(-tokens // ps), n))


def plan_load_back(cache, state: LaneState, node_id, free: Optional[Sequence[int]] = None):
    """Tokens, need, free and the owner-lane plan for loading ``node_id`` (pure CPU, nothing
    evicted). ``free`` defaults to the allocator's free pages per lane."""
    tree = TreeView(cache.tree_core, state.priority, state.shard_size, state.page_size)
    tokens, need = lane_need(tree, evicted_segment(cache.tree_core, node_id))
    if free is None:
        free = state.allocator.class_free_page_counts()
    return tokens, need, free, plan_lanes(cache, state, need, free, tree)


def plan_lanes(cache, state: LaneState, need: Sequence[int], free: Sequence[int],
               tree: Optional[TreeView] = None):
    """The owner-lane plan covering ``need - free`` per lane on ``cache`` (pure CPU, nothing evicted)."""
    if tree is None:
        tree = TreeView(cache.tree_core, state.priority, state.shard_size, state.page_size)
    index = state.leaf_index(cache.tree_core)
    plan = plan_owner_lane_eviction(
        tree, need, free, None if index is None else _ViewIndex(index, tree), state.shard_size
    )
    finish_plan(plan)
    return plan


def evict_planned(cache, nodes: Sequence) -> int:
    """Evict ``nodes`` (tree nodes, children before parents) as upstream's
    ``_evict_components`` evicts a victim; returns the Full tokens evicted."""
    start = time.perf_counter()
    tracker = {ct: 0 for ct in cache.tree_components}
    leaves = cache.tree_core.evictable_device_leaves
    for node in nodes:
        if node not in leaves:  # locked or gone since planning: the free-count check catches a shortfall
            continue
        backup_kv = cache._evict_device_leaf(node.id, tracker)
        if backup_kv is None:
            continue
        # Write-back: run the D->H backup, demote only on success (upstream's deferred demote).
        if cache._execute_and_commit_kv_backup(backup_kv, write_back=True) > 0:
            cache.writing_check(write_back=True)
            cache._demote(node.id, tracker)
        elif cache._drop_subtree_no_host(node.id, tracker):
            logger.warning(
                "write_back: KV subtree dropped without backup due to host memory pressure, "
                "root node %d (owner-lane eviction)", node.id,
            )
    if cache.is_write_back:
        cache.writing_check(write_back=True)
    cache.update_eviction_metrics(tracker[_full()], start)
    return tracker[_full()]


def lane_report(**lanes) -> str:
    """``need=[0,1,1,1] free=[0,4,4,4]``: per-lane vectors for one log line."""
    return " ".join(f"{name}=[{','.join(map(str, values))}]" for name, values in lanes.items())


# --------------------------------------------------------------------------- the gate


class LaneGate:
    """Upstream's load-back admission gate, per owner lane, for one call.

    Used as a context manager around the original ``_load_back_transfers``: it
    shadows ``_component_available_size`` and ``evict_for_alloc`` on the instance.
    The first Full availability query decides (plan, evict the plan if it covers
    every deficit); afterwards Full availability is at least the load's tokens when
    admitted, upstream's own value when refused, and ``evict_for_alloc`` is empty,
    so upstream's lane-blind eviction never runs in this call after the decision.
    """

    def __init__(self, cache, state: LaneState, node_id):
        self.cache = cache
        self.state = state
        self.node_id = node_id
        self.admitted: Optional[int] = None  # None: undecided; 0: refused; else tokens admitted
        self._saved: dict = {}

    def __enter__(self):
        d = self.cache.__dict__
        for name in ("_component_available_size", "evict_for_alloc"):
            self._saved[name] = d.get(name, _MISSING)
        self._available = self.cache._component_available_size
        self._evict_for_alloc = self.cache.evict_for_alloc
        d["_component_available_size"] = self.available
        d["evict_for_alloc"] = self.evict_for_alloc
        return self

    def __exit__(self, *exc) -> None:
        d = self.cache.__dict__
        for name, saved in self._saved.items():
            if saved is _MISSING:
                d.pop(name, None)
            else:
                d[name] = saved

    def available(self, component_type):
        real = self._available(component_type)
        if component_type != _full():
            return real
        if self.admitted is None:
            self.admitted = self._decide()
        return max(real, self.admitted)

    def evict_for_alloc(self, params, **kwargs):
        if self.admitted is None:
            return self._evict_for_alloc(params, **kwargs)
        from sglang.srt.mem_cache.base_prefix_cache import EvictResult

        return EvictResult()

    def _decide(self) -> int:
        """Plan; evict a covering plan; the tokens admitted, or 0 (refused, nothing evicted)."""
        state = self.state
        t0 = time.perf_counter()
        tokens, need, free, plan = plan_load_back(self.cache, state, self.node_id)
        self._count_plan(plan, need, free, (time.perf_counter() - t0) * 1e3)
        if not plan.covered:
            state.counters.record_warning(ctr.WARN_REFUSED)
            logger.debug("owner-lane load-back: node %d refused, nothing evicted; %s", self.node_id,
                         lane_report(need=need, free=free, uncovered=plan.remaining))
            return 0
        if not plan.leaves:
            return tokens
        evict_planned(self.cache, [view.node for view in plan.leaves])
        after = state.allocator.class_free_page_counts()
        freed = [a - b for a, b in zip(after, free)]
        state.counters.record_eviction(freed, len(plan.leaves))
        still_short = any(a < x for a, x in zip(after, need))
        if still_short or any(f < p for f, p in zip(freed, plan.pages_per_lane)):
            state.counters.record_warning(ctr.WARN_SHORT_EVICTION)
            logger.warning("owner-lane load-back: node %d, the planned eviction freed less than planned%s; %s",
                           self.node_id, " (load refused)" if still_short else "",
                           lane_report(planned=plan.pages_per_lane, freed=freed, need=need, free=after))
        return 0 if still_short else tokens

    def _count_plan(self, plan, need, free, plan_ms: float) -> None:
        limit = self.state.slow_plan_ms
        if self.state.counters.record_plan(plan, plan_ms, limit):
            logger.warning("owner-lane load-back: node %d, planning took %.2f ms > %.2f ms (%d nodes scanned); %s",
                           self.node_id, plan_ms, limit, plan.scanned,
                           lane_report(need=need, free=free, deficit=plan.deficit))

    def account(self, loaded: bool) -> None:
        """Count the outcome of a call the gate decided (upstream may refuse before the gate)."""
        if self.admitted is None:
            return
        self.state.counters.record_outcome(bool(loaded))
        if self.admitted and not loaded:
            self.state.counters.record_warning(ctr.WARN_SHORT_EVICTION)
            logger.warning("owner-lane load-back: node %d admitted per lane but upstream's load failed; %s",
                           self.node_id, lane_report(free=self.state.allocator.class_free_page_counts()))
