"""What one side (patch or upstream) of an owner-lane benchmark observed, call by call.

A :class:`Tally` times each call (wall time from call to return and the calling thread's CPU time, which
other jobs on shared cores disturb less) and records, outside the timing, what the call served and evicted:
:func:`eviction_split` of the device nodes before and after against the call's per-lane deficit. A lane is
short for a call when its need exceeds its free pages; the deficit is the pages it lacks. Both releases'
adapters and both benchmarks record through it, so "pages evicted per deficit page" means one thing on
every pin.

    tally = Tally()
    with tally.clock(sync):                 # sync: torch.cuda.synchronize on CUDA, else None
        served = cache.load_back(node)
    tally.record(served, can, deficit, before, after)   # before/after: {node: pages per lane}

Invariant: nothing here reads a cache or a tensor: snapshots are the adapters' {node: pages per lane}.
Cost: O(device nodes of the snapshot) per recorded call, untimed.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import Callable, Optional, Sequence


def eviction_split(before: dict, after, deficit: Sequence[int]):
    """Pages evicted: of short lanes, of non-short lanes (all), in units holding no short-lane page; nodes.

    ``before`` maps each device node to its pages per lane; a node of ``before`` not in ``after`` was
    evicted. A unit is an evicted node with its evicted descendants (it goes whole), so the pages of
    non-short lanes a unit holds beside short-lane pages are counted in the second figure, not the third.
    """
    gone = [x for x in before if x not in after]
    gone_set = set(gone)
    short = [d > 0 for d in deficit]
    units: dict = {}
    for x in gone:
        root = x
        while root.parent in gone_set:
            root = root.parent
        units.setdefault(root, []).append(x)
    short_pages = nonshort_lane_pages = nonshort_unit_pages = 0
    for members in units.values():
        counts = [sum(before[x][c] for x in members) for c in range(len(deficit))]
        s = sum(c for c, is_short in zip(counts, short) if is_short)
        short_pages += s
        nonshort_lane_pages += sum(counts) - s
        if s == 0:
            nonshort_unit_pages += sum(counts)
    return short_pages, nonshort_lane_pages, nonshort_unit_pages, len(gone)


def coverable(before: dict, off_limits, locked: Callable, deficit: Sequence[int]) -> bool:
    """Whether any eviction could cover ``deficit``: the union of every unlocked device node off the load's
    path (``off_limits``) is the largest valid eviction set (an unlocked node's device subtree is unlocked)."""
    supply = [0] * len(deficit)
    for node, counts in before.items():
        if node not in off_limits and not locked(node):
            supply = [s + c for s, c in zip(supply, counts)]
    return all(d <= s for d, s in zip(deficit, supply))


def pct(values, q):
    """The ``q``-th percentile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


class Tally:
    """Per-call observations of one side; :meth:`figures` summarizes them (names: ``schema``'s maps)."""

    def __init__(self):
        self.times: list = []
        self.cpu_times: list = []
        self.calls = self.served = self.coverable = self.served_coverable = 0
        self.deficit_pages = self.short_pages = self.nonshort_lane_pages = self.nonshort_unit_pages = 0
        self.nodes_evicted = self.calls_without_deficit = self.evicted_without_deficit = 0

    @contextmanager
    def clock(self, sync: Optional[Callable] = None):
        """Time the block from entry to return (``sync()`` first, so a device's queued work counts)."""
        c, t = time.thread_time(), time.perf_counter()
        try:
            yield
            if sync is not None:
                sync()
        finally:
            self.times.append((time.perf_counter() - t) * 1e3)
            self.cpu_times.append((time.thread_time() - c) * 1e3)

    def record(self, served: bool, can: bool, deficit: Sequence[int], before: dict, after) -> None:
        s, nl, nu, g = eviction_split(before, after, deficit)
        self.calls += 1
        self.served += bool(served)
        self.coverable += bool(can)
        self.served_coverable += bool(served and can)
        self.deficit_pages += sum(deficit)
        self.short_pages += s
        self.nonshort_lane_pages += nl
        self.nonshort_unit_pages += nu
        self.nodes_evicted += g
        if not any(deficit):
            self.calls_without_deficit += 1
            self.evicted_without_deficit += s + nl

    def figures(self) -> dict:
        return dict(
            calls=self.calls,
            served=self.served,
            served_rate=self.served / self.calls if self.calls else None,
            coverable=self.coverable,
            success_rate=self.served_coverable / self.coverable if self.coverable else 1.0,
            deficit_pages=self.deficit_pages,
            short_pages=self.short_pages,
            short_per_deficit_page=self.short_pages / self.deficit_pages if self.deficit_pages else 0.0,
            nonshort_unit_pages=self.nonshort_unit_pages,
            nonshort_lane_pages=self.nonshort_lane_pages,
            nodes_evicted=self.nodes_evicted,
            calls_without_deficit=self.calls_without_deficit,
            evicted_without_deficit=self.evicted_without_deficit,
            time_ms_median=statistics.median(self.times) if self.times else None,
            time_ms_mean=statistics.fmean(self.times) if self.times else None,
            time_ms_p99=pct(self.times, 99),
            cpu_ms_median=statistics.median(self.cpu_times) if self.cpu_times else None,
        )
