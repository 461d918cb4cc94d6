"""Small real HiRadixCache trees for planner property tests, and exact oracles over any tree.

``build_tree`` grows a tree on upstream's real HiRadixCache / PageInterleavePoolAllocator
(``build_cpu_hicache`` of ``tests/patches/cp_hicache_owner_lanes/hiradix/hicache_cpu.py``) from a list of chain specs, each attached to the root or
to a page-prefix of an earlier chain (so interior nodes, splits and single-child chains all
occur), then touches and locks nodes as the spec says. Nothing in it is a stand-in; it imports
0.5.20's classes only when called. ``plain_tree.build_tree`` grows the same spec on the stand-in.

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

import itertools
from typing import Dict, List, Optional, Sequence, Tuple

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md


def build_tree(
    n: int,
    chains: Sequence[Tuple[int, int, int, int]],
    touches=(),
    locks=(),
    policy: str = "lru",
    pages_per_rank: int = 16,
):
    """A real page-interleaved HiRadixCache holding ``chains``.

    Each chain is ``(parent, cut, pages, base)``: ``parent`` -1 starts a new chain from the
    root with rotation base ``base``; otherwise it extends the first ``cut`` pages (clamped)
    of chain ``parent % len(so_far)``, continuing that chain's rotation. Page size 1.
    ``touches``/``locks`` index the chains: a touch re-matches the chain (an access-time
    bump, as a request hit does), a lock takes ``inc_lock_ref`` on its last node.
    Returns (cache, token lists of the chains, locked nodes).
    """
    from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc

    cache = hc.build_cpu_hicache(n, 1, pages_per_rank, eviction_policy=policy, layers=1, heads=1, head_dim=1)
    tokens: List[List[int]] = []
    fresh = itertools.count(1)
    for parent, cut, pages, base in chains:
        if parent < 0 or not tokens:
            prefix, b = [], base % n
        else:
            ptoks = tokens[parent % len(tokens)]
            prefix = ptoks[: max(1, min(cut, len(ptoks)))]
            match = cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(prefix)))
            if len(match.device_indices) < len(prefix):
                continue  # (cannot happen without evictions; kept for safety)
            b = cache.rotation_base_of(match.last_device_node)
        toks = prefix + [next(fresh) * 1000 + len(tokens) for _ in range(pages)]
        new, b = hc.alloc_chain(cache, len(prefix), len(toks), b)
        if new is None:
            continue  # pool full: the spec asked for more than the pool holds
        prefix_idx = cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(prefix))).device_indices
        value = hc.torch.cat([prefix_idx, new])
        result = cache.insert(hc.InsertParams(key=hc.key_of(toks), value=value.clone(), rotation_base=b))
        assert result.prefix_len == len(prefix)
        tokens.append(toks)
    hc.settle(cache)
    for i in touches:
        if tokens:
            cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(tokens[i % len(tokens)])))
    locked = []
    for i in locks:
        if tokens:
            node = hc.path_nodes(cache, tokens[i % len(tokens)])[-1][0]
            cache.inc_lock_ref(node)
            locked.append(node)
    return cache, tokens, locked


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
