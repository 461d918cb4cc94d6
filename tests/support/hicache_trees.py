"""Exact oracles over any owner-lane tree, for the planner's property tests.

The trees are ``plain_tree.build_tree``'s (the stand-in, ``tests/support/plain_tree.py``) or a release's real
cache; nothing here builds one.

Oracles (test-only; they read metadata, never the planner; duck-typed: a ``root_node`` whose
nodes have ``children``, ``parent``, ``value``, ``lock_ref`` and owner metadata, so they answer
on the real cache and on the stand-in alike; cost: O(nodes), ``optimum_pages`` exponential):

- ``coverable``: whether any eviction can cover the deficits. Exact in O(nodes): the union of
  every unlocked device node is itself a valid eviction set (an unlocked node's device
  subtree is unlocked, since locking a node locks its ancestors) and contains every other.
- ``optimum_pages``: the fewest pages of any valid eviction set that covers the deficits,
  by enumerating the closed sets (a node goes only with all its device children), i.e.
  brute force: exponential, for trees of a dozen device nodes.
- ``plan_units``: a plan's units, the planned nodes whose parent is not planned, each with
  its planned descendants.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md


def all_nodes(cache) -> list:
    """Every node under ``cache.root_node`` (the root excluded)."""
    stack, out = [cache.root_node], []
    while stack:
        x = stack.pop()
        if x is not cache.root_node:
            out.append(x)
        stack.extend(x.children.values())
    return out


def device_nodes(cache) -> list:
    return [x for x in all_nodes(cache) if x.value is not None]


def _evictable_nodes(cache) -> list:
    return [x for x in device_nodes(cache) if x.lock_ref == 0]


def coverable(cache, deficit: Sequence[int], n: int) -> bool:
    total = [0] * n
    for x in _evictable_nodes(cache):
        for c, pages in enumerate(md.get(x).owner_counts(n)):
            total[c] += pages
    return all(total[c] >= deficit[c] for c in range(n))


def optimum_pages(cache, deficit: Sequence[int], n: int) -> Optional[int]:
    """Fewest pages of a valid eviction set covering ``deficit`` (None: none exists)."""
    nodes = _evictable_nodes(cache)
    assert len(nodes) <= 16, f"brute force over {len(nodes)} nodes"
    index = {x: i for i, x in enumerate(nodes)}
    counts = [md.get(x).owner_counts(n) for x in nodes]
    kids = [[index[ch] for ch in x.children.values() if ch.value is not None] for x in nodes]
    best: Optional[int] = None
    for mask in range(1 << len(nodes)):
        if any(mask >> i & 1 and any(not mask >> k & 1 for k in kids[i]) for i in range(len(nodes))):
            continue  # not closed: a node would go before one of its device children
        chosen = [i for i in range(len(nodes)) if mask >> i & 1]
        if all(sum(counts[i][c] for i in chosen) >= deficit[c] for c in range(n)):
            pages = sum(sum(counts[i]) for i in chosen)
            best = pages if best is None else min(best, pages)
    return best


def plan_units(plan) -> List[list]:
    """The plan's units: each planned node whose parent is not planned, with its planned subtree."""
    planned = set(plan.leaves)
    units = []
    for root in plan.leaves:
        if root.parent in planned:
            continue
        unit, stack = [], [root]
        while stack:
            x = stack.pop()
            unit.append(x)
            stack.extend(ch for ch in x.children.values() if ch in planned)
        units.append(unit)
    return units


def pages_of(nodes, n: int) -> int:
    return sum(sum(md.get(x).owner_counts(n)) for x in nodes)


def lane_totals(nodes, n: int) -> List[int]:
    total = [0] * n
    for x in nodes:
        for c, pages in enumerate(md.get(x).owner_counts(n)):
            total[c] += pages
    return total


def is_closed_eviction_order(plan) -> bool:
    """Every planned node's device children are planned, and come before it."""
    position: Dict[object, int] = {x: i for i, x in enumerate(plan.leaves)}
    for i, x in enumerate(plan.leaves):
        for ch in x.children.values():
            if ch.value is not None and position.get(ch, len(plan.leaves)) > i:
                return False
    return len(position) == len(plan.leaves)


def check_against_oracles(cache, plan, deficit: Sequence[int], n: int, work=None) -> Optional[int]:
    """Every property the planner promises, against the exact oracles; the plan's excess pages over
    the optimum (None when the deficit is not coverable). ``work``: a ``count_tensor_work`` record
    of the planning, which must be empty (on the real cache; the stand-in holds no tensor)."""
    if work is not None:
        assert work.total == 0 and work.host_syncs == 0
    can = coverable(cache, deficit, n)
    assert plan.covered == can, (deficit, plan.remaining)
    if not can:
        return None
    assert is_closed_eviction_order(plan)
    assert all(x.lock_ref == 0 and x.value is not None for x in plan.leaves)
    totals = lane_totals(plan.leaves, n)
    assert totals == plan.pages_per_lane
    assert all(totals[c] >= deficit[c] for c in range(n))
    units = plan_units(plan)
    for unit in units:  # minimal: without its root's own pages some lane falls short
        own = lane_totals(unit[:1], n)
        assert any(totals[c] - own[c] < deficit[c] for c in range(n)), "a redundant unit was kept"
    d = sum(deficit)
    m = max(pages_of(u, n) for u in units)
    pages = pages_of(plan.leaves, n)
    optimum = optimum_pages(cache, deficit, n)
    assert optimum is not None and optimum >= d
    assert len(units) <= d  # every unit is needed by some lane
    assert pages <= d * m
    assert pages - optimum <= d * (m - 1), (pages, optimum, d, m)
    return pages - optimum


def path_key(node) -> tuple:
    """A node's whole token path from the root: names the same node on the real cache and the stand-in."""
    parts = []
    while node.parent is not None:
        parts.append(tuple(node.key.token_ids) if hasattr(node.key, "token_ids") else tuple(node.key))
        node = node.parent
    return tuple(t for part in reversed(parts) for t in part)
