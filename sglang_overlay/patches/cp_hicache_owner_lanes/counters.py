"""Operator-facing counters of the owner-lane paths, on every release.

Job: plain integers on the cache's state (read them with :func:`counters_of`), mirrored to Prometheus
when the cache has a metrics collector (``--enable-metrics``): ``sglang:cp_owner_lane_evicted_pages_total``
(``lane``), ``..._warnings_total`` (``reason``), ``..._load_backs_total`` (``outcome``) and
``..._capacity_evictions_total`` (``by``), with the collector's own labels.
Invariant: counting never changes a decision. Cost: a few integer adds; one Counter lookup per mirror.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from sglang_overlay.patches.cp_hicache_owner_lanes.cache_state import STATE_ATTR

WARN_SLOW_PLAN = "slow_plan"
WARN_SHORT_EVICTION = "evicted_less_than_planned"
WARN_REFUSED = "deficit_remains"

_PROM: Dict[tuple, object] = {}
_PROM_LOCK = threading.Lock()


@dataclass
class OwnerLaneCounters:
    """Every field counts events since the cache's state was built; the unit is in each comment."""

    num_lanes: int  # lanes (the allocator's shard size): the length of ``pages_evicted_per_lane``
    load_backs: int = 0  # load-back calls the lane gate admitted and upstream's load served
    refused: int = 0  # load-back calls refused: a lane deficit no eviction could cover
    plans: int = 0  # planning passes that had at least one lane deficit
    capacity_plans: int = 0  # capacity calls (prefill/decode) whose lane deficits a plan covered and evicted
    capacity_fallbacks: int = 0  # capacity calls whose deficits no plan covered: upstream's eviction ran
    leaves_scanned: int = 0  # nodes the planner read, summed over plans with a deficit
    leaves_evicted: int = 0  # nodes evicted by executed plans
    pages_evicted_per_lane: List[int] = field(default_factory=list)  # device pages freed by plans, per lane
    warnings: Dict[str, int] = field(default_factory=dict)  # warnings logged, per reason (``WARN_*``)
    _collector: Optional[object] = None

    def __post_init__(self) -> None:
        if not self.pages_evicted_per_lane:
            self.pages_evicted_per_lane = [0] * self.num_lanes

    def bind_collector(self, collector) -> None:
        """Mirror into Prometheus with ``collector.labels`` (upstream's collector)."""
        self._collector = collector

    def _prom(self, name: str, doc: str, extra: str):
        labels = tuple(sorted(self._collector.labels)) if self._collector is not None else ()
        key = (name, labels)
        with _PROM_LOCK:
            metric = _PROM.get(key)
            if metric is None:
                from prometheus_client import Counter

                metric = Counter(name=name, documentation=doc, labelnames=list(labels) + [extra])
                _PROM[key] = metric
        return metric

    def _inc(self, name: str, doc: str, extra: str, value: str, amount: int) -> None:
        if self._collector is None or amount <= 0:
            return
        metric = self._prom(name, doc, extra)
        metric.labels(**self._collector.labels, **{extra: value}).inc(amount)

    def record_plan(self, plan, plan_ms: float, slow_ms: float) -> bool:
        """Count one plan (a plan that had a deficit to cover counts its scan); True when it took longer
        than ``slow_ms`` milliseconds (``plan_ms``: its duration, milliseconds), counted as a slow-plan
        warning that the caller logs. The duration decides the warning only: it is not kept."""
        if any(plan.deficit):
            self.plans += 1
            self.leaves_scanned += plan.scanned
        if plan_ms <= slow_ms:
            return False
        self.record_warning(WARN_SLOW_PLAN)
        return True

    def record_eviction(self, pages_per_lane, leaves: int) -> None:
        self.leaves_evicted += leaves
        for lane, pages in enumerate(pages_per_lane):
            self.pages_evicted_per_lane[lane] += pages
            self._inc(
                "sglang:cp_owner_lane_evicted_pages_total",
                "Device pages freed by owner-lane eviction for HiCache load-back, per owner lane.",
                "lane",
                str(lane),
                pages,
            )

    def record_warning(self, reason: str) -> None:
        self.warnings[reason] = self.warnings.get(reason, 0) + 1
        self._inc(
            "sglang:cp_owner_lane_warnings_total",
            "Owner-lane load-back warnings (slow planning, short eviction, refused load).",
            "reason",
            reason,
            1,
        )

    def record_outcome(self, loaded: bool) -> None:
        if loaded:
            self.load_backs += 1
        else:
            self.refused += 1
        self._inc(
            "sglang:cp_owner_lane_load_backs_total",
            "HiCache load-backs under page-owner residency, by outcome.",
            "outcome",
            "loaded" if loaded else "refused",
            1,
        )

    def record_capacity(self, planned: bool) -> None:
        """One 0.5.23 capacity deficit: evicted per owner lane (``planned``) or handed to upstream."""
        if planned:
            self.capacity_plans += 1
        else:
            self.capacity_fallbacks += 1
        self._inc(
            "sglang:cp_owner_lane_capacity_evictions_total",
            "Prefill/decode capacity deficits under page-owner residency, by who chose the victims.",
            "by",
            "owner_lanes" if planned else "upstream",
            1,
        )

    def as_dict(self) -> dict:
        return {
            "load_backs": self.load_backs,
            "refused": self.refused,
            "plans": self.plans,
            "capacity_plans": self.capacity_plans,
            "capacity_fallbacks": self.capacity_fallbacks,
            "leaves_scanned": self.leaves_scanned,
            "leaves_evicted": self.leaves_evicted,
            "pages_evicted_per_lane": list(self.pages_evicted_per_lane),
            "warnings": dict(self.warnings),
        }


def counters_of(cache) -> Optional[OwnerLaneCounters]:
    """The owner-lane counters of a cache (None when the patch is inactive on it)."""
    state = getattr(cache, STATE_ATTR, None)
    return state.counters if state else None
