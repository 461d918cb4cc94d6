"""Stand-in trees and one-call plans for the owner-lane planner's tests at the root (``test_planner_*.py``).

Trees are ``tests/support/plain_tree.py`` (a STAND-IN: plain nodes under HiRadixCache's leaf, lock and access
rules, upstream's eviction strategies); no release's cache class is built.
Invariant: no test here; every tree is new and page ids never repeat within a process. Cost: a busy tree of 300
leaves in milliseconds, nothing at import.
"""

from __future__ import annotations

import itertools
import random

from sglang_overlay.patches.cp_hicache_owner_lanes.planner import finish_plan, plan_owner_lane_eviction
from tests.support import plain_tree as pt

_PAGES = itertools.count(10_000)


def plan_for(tree, deficit, n, index=None):
    """The finished plan for ``deficit`` with no free pages (the tree's own index unless one is given)."""
    plan = plan_owner_lane_eviction(tree, list(deficit), [0] * n, tree.index if index is None else index, n)
    finish_plan(plan)
    return plan


def leaf(tree, lane, pages=1):
    """A chain of ``pages`` pages from the root, its first page in ``lane``; returns its node."""
    return tree.insert([next(_PAGES) for _ in range(pages)], lane)


def indexed_tree(n, policy="lru"):
    """An empty stand-in tree of ``n`` lanes under ``policy``, with its leaf index."""
    tree = pt.PlainTree(n, policy)
    tree.index = pt.leaf_index(tree)
    return tree


def busy_tree(leaves=300, n=8, seed=0):
    """Shared prompts with many conversation leaves of one to three chains' worth of pages, plus an
    evicted target chain (two pages per lane); returns (tree, target path)."""
    rng = random.Random(seed)
    tree = indexed_tree(n)
    ps = 2  # pages per "turn unit"
    prompts = [[p * 10_000_000 + i for i in range(4 * ps)] for p in range(8)]
    target = [99_000_000 + i for i in range(2 * n)]
    tree.insert(target, 0)
    tree.evict(tree.path(target)[-1])
    for i in range(leaves):
        prompt = prompts[rng.randrange(len(prompts))]
        tree.insert(prompt + [50_000_000 + i * 1000 + j for j in range(rng.randint(1, 3) * ps)], rng.randrange(n))
    return tree, target
