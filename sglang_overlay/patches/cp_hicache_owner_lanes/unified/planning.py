"""What a 0.5.23 load-back needs per owner lane, and the owner-lane plan covering a deficit.

Job: the evicted segment above a node, its need per lane (closed form from the top node's rotation phase),
and plans over the cache's tree (``lane_tree.UnifiedLaneTree``) and leaf index (shared by the load-back gate and capacity eviction).
Invariant: pure CPU, nothing evicted; entries the walk popped are handed back to the index.
Cost: one walk to the root, N free counts (lengths), and the planner's scan when a lane is short.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md
from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, plan_owner_lane_eviction
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.lane_tree import UnifiedLaneTree
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.state import LaneState
from sglang_overlay.patches.cp_hicache_owner_lanes.unified.upstream import full as _full


def evicted_segment(tree_core, node_id) -> list:
    """The nodes a load-back of ``node_id`` brings back, top-first (upstream's walk)."""
    nodes = []
    cur = tree_core.node_by_id(node_id)
    while cur.evicted:
        nodes.append(cur)
        cur = cur.parent
    nodes.reverse()
    return nodes


def lane_need(tree: UnifiedLaneTree, segment: Sequence) -> Tuple[int, List[int]]:
    """Tokens and pages per lane that ``alloc_cyclic`` draws for loading ``segment``.

    The start lane is the top node's rotation phase (its host slots were drawn at
    it). A top node without a rotation base (an insert path that carried none) falls
    back to the lane of its first host slot: one read of a CPU tensor, the read
    upstream's ``load`` makes anyway.
    """
    n, ps = tree.num_lanes, tree.page_size
    tokens = sum(len(x.key) for x in segment)
    if not segment:
        return 0, [0] * n
    start = tree.first_lane(segment[0])
    if start is None:
        start = int(segment[0].component_data[_full()].host_value[0]) // ps % n
    return tokens, list(md.run_lane_pages(start, -(-tokens // ps), n))


def plan_load_back(cache, state: LaneState, node_id, free: Optional[Sequence[int]] = None):
    """Tokens, need, free and the owner-lane plan for loading ``node_id`` (pure CPU, nothing
    evicted). ``free`` defaults to the allocator's free pages per lane."""
    tree = UnifiedLaneTree(cache.tree_core, state.priority, state.shard_size, state.page_size)
    tokens, need = lane_need(tree, evicted_segment(cache.tree_core, node_id))
    if free is None:
        free = state.allocator.class_free_page_counts()
    return tokens, need, free, plan_lanes(cache, state, need, free, tree)


def plan_lanes(
    cache, state: LaneState, need: Sequence[int], free: Sequence[int], tree: Optional[UnifiedLaneTree] = None
):
    """The owner-lane plan covering ``need - free`` per lane on ``cache`` (pure CPU, nothing evicted)."""
    if tree is None:
        tree = UnifiedLaneTree(cache.tree_core, state.priority, state.shard_size, state.page_size)
    plan = plan_owner_lane_eviction(tree, need, free, state.leaf_index(cache.tree_core), state.shard_size)
    finish_plan(plan)
    return plan
