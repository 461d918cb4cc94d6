"""What only the pre-0.5.23 (hiradix) adapter measures beside the whole path: planning baselines, plan checks, replay.

- (b) the fork's rejected planner: upstream's full heap over every evictable leaf, per-leaf owner counts derived
  from the device index tensors (kept here only as the baseline); (b') the patch's own index walk with
  tensor-derived counts, isolating the counting cost;
- the planner's own claims on each plan: no redundant unit (:func:`redundant_leaves`) and its stated bound
  (:func:`bound_violated`);
- the shared-KV replay: multi-turn conversations sharing long system prompts through a tight device pool and a
  larger host pool (write-through), for the patch and for upstream's fallback path: load-back success, tokens
  re-prefilled because a load-back was refused, planning p99.

Invariant: the baselines plan only (nothing evicted; the index entries they pop are handed back).
Cost: (b) O(evictable leaves) per plan (its heap); the replay, one small cache per side.
"""

from __future__ import annotations

import heapq
import itertools
import random

from .hiradix_trees import PS, N, upstream_fallback_load_back
from .tally import pct


def tensor_counts(node, n, ps):
    import torch

    return torch.bincount((node.value[::ps] // ps) % n, minlength=n).tolist()


def walk_take(cache, stream, need, free, n, ps, counts_of):
    """The lane walk shared by the baselines: take a leaf only if it frees a deficit lane."""
    left = [max(0, need[c] - free[c]) for c in range(n)]
    get_priority = cache.eviction_strategy.get_priority
    chosen, promoted, seq, scanned = [], [], itertools.count(), 0
    chosen_set = set()
    upcoming = next(stream, None)
    while any(left):
        if promoted and (upcoming is None or promoted[0][0] <= get_priority(upcoming)):
            node = heapq.heappop(promoted)[2]
        elif upcoming is not None:
            node, upcoming = upcoming, next(stream, None)
        else:
            break
        scanned += 1
        if node.lock_ref > 0 or node.value is None or node in chosen_set:
            continue
        counts = counts_of(node, n, ps)
        if not any(counts[c] and left[c] for c in range(n)):
            continue
        chosen.append(node)
        chosen_set.add(node)
        for c in range(n):
            left[c] = max(0, left[c] - counts[c])
        p = node.parent
        if p is not cache.root_node and p.value is not None:
            if all(ch.value is None or ch in chosen_set for ch in p.children.values()):
                heapq.heappush(promoted, (get_priority(p), next(seq), p))
    return chosen, scanned, not any(left)


def fork_tensor_plan(cache, need, free):
    """(b): upstream's heap over every evictable leaf + tensor-derived owner counts."""
    heap = cache._make_eviction_heap()
    stream = (heapq.heappop(heap)[1] for _ in range(len(heap)))
    return walk_take(cache, stream, need, free, N, PS, tensor_counts)


def same_walk_tensor_plan(cache, state, need, free):
    """(b'): the patch's index walk, tensor-derived owner counts."""
    popped = []
    try:
        return walk_take(cache, state.index.ordered(popped), need, free, N, PS, tensor_counts)
    finally:
        state.index.restore(popped)


def redundant_leaves(plan, n):
    """Planned unit roots (nodes whose parent is not planned; a planned parent forces its
    children) whose removal still leaves every deficit covered (over-eviction)."""
    from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md

    planned = set(plan.leaves)
    counts = [md.get(x).owner_counts(n) for x in plan.leaves]
    total = [sum(c[lane] for c in counts) for lane in range(n)]
    return sum(
        1
        for x, c in zip(plan.leaves, counts)
        if x.parent not in planned and all(total[lane] - c[lane] >= plan.deficit[lane] for lane in range(n))
    )


def bound_violated(plan, n) -> bool:
    """The planner's stated bound: at most D units (D = deficit pages), so at most
    D * M pages, M the largest unit (a planned node whose parent is not planned,
    with its planned descendants)."""
    from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md

    planned = set(plan.leaves)
    unit_pages = {}
    for x in plan.leaves:  # eviction order: descendants first, so a root closes its unit
        root = x
        while root.parent in planned:
            root = root.parent
        unit_pages[root] = unit_pages.get(root, 0) + md.get(x).num_pages
    d = sum(plan.deficit)
    pages = sum(unit_pages.values())
    return len(unit_pages) > d or pages > d * max(unit_pages.values(), default=0)


def replay(use_patch: bool, conversations: int, turns: int, seed: int, device: str = "cpu") -> dict:
    """The shared-KV pressure replay on one side (``use_patch``: the patch's load_back, else upstream's path)."""
    from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of
    from tests.patches.cp_hicache_owner_lanes.hiradix import hicache_cpu as hc

    rng = random.Random(seed)
    prompts = [[900_000_000 + p * 100_000 + i for i in range(rng.randint(16, 24) * PS)] for p in range(4)]
    cache = hc.build_cpu_hicache(
        N, PS, 24, write_policy="write_through", host_ratio=8.0, layers=1, heads=1, head_dim=1, device=device
    )
    histories = [list(prompts[c % len(prompts)]) for c in range(conversations)]
    tok = itertools.count(1)
    attempts = loaded = refused = reprefilled = oom = 0
    plan_ms = []
    for _ in range(turns):
        for c in rng.sample(range(conversations), conversations):
            histories[c] += [next(tok) for _ in range(rng.randint(2, 6) * PS)]
            toks = histories[c]
            match = cache.match_prefix(hc.MatchPrefixParams(key=hc.key_of(toks)))
            node = match.best_match_node
            if node.evicted:
                attempts += 1
                if use_patch:
                    got = cache.load_back(node)
                    plan_ms.append(counters_of(cache).last_plan_ms)
                    ok = got is not None and len(got) > 0
                else:
                    ok, ms, _ = upstream_fallback_load_back(cache, node)
                    plan_ms.append(ms)
                if ok:
                    loaded += 1
                    hc.settle(cache)
                else:
                    refused += 1
                    reprefilled += match.host_hit_length
            if hc.prefill(cache, toks, load_back=False) is None:  # the load-back was tried above
                oom += 1
                histories[c] = list(prompts[c % len(prompts)])
    counters = counters_of(cache)
    return {
        "refused_uncoverable": counters.warnings.get("deficit_remains", 0) if use_patch else None,
        "refused_short_eviction": counters.warnings.get("evicted_less_than_planned", 0) if use_patch else None,
        "load_back_attempts": attempts,
        "load_back_success_rate": loaded / attempts if attempts else 1.0,
        "tokens_reprefilled_after_refusal": reprefilled,
        "planning_p99_ms": pct(plan_ms, 99),
        "requests_dropped_oom": oom,
    }
