"""The owner-lane counters operators read: plain integers that accumulate, and their Prometheus mirror.

The release's load-back path counts through ``OwnerLaneCounters``; the mirror goes to prometheus_client's
default registry (what SGLang's ``/metrics`` serves) with the collector's own labels. The collector here
is a stand-in holding only what the counters read of upstream's (``.labels``); each test uses its own
label value, so samples never mix across tests, and runs with the overlay's metrics set aside (a metric
name holds one label-name set per registry, and unified/test_metrics.py registers upstream's collector labels).
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from sglang_overlay.patches.cp_hicache_owner_lanes import counters as ctr
from sglang_overlay.patches.cp_hicache_owner_lanes.counters import (
    WARN_REFUSED,
    WARN_SLOW_PLAN,
    OwnerLaneCounters,
    counters_of,
)

EVICTED = "sglang:cp_owner_lane_evicted_pages_total"
WARNINGS = "sglang:cp_owner_lane_warnings_total"
CAPACITY = "sglang:cp_owner_lane_capacity_evictions_total"
LOAD_BACKS = "sglang:cp_owner_lane_load_backs_total"


@pytest.fixture(autouse=True)
def own_metrics():
    """The overlay's registered metrics set aside for the test, and put back after it."""
    saved = dict(ctr._PROM)
    for metric in saved.values():
        REGISTRY.unregister(metric)
    ctr._PROM.clear()
    yield
    for metric in ctr._PROM.values():
        REGISTRY.unregister(metric)
    ctr._PROM.clear()
    ctr._PROM.update(saved)
    for metric in saved.values():
        REGISTRY.register(metric)


def collector():
    return SimpleNamespace(labels={"model_name": f"counters-{uuid.uuid4().hex}"})


def sample(name: str, coll, **labels):
    return REGISTRY.get_sample_value(name, {**coll.labels, **labels})


def record_some(c: OwnerLaneCounters) -> None:
    c.record_eviction([1, 0, 2, 0], leaves=2)
    c.record_eviction([0, 3, 1, 0], leaves=1)
    c.record_warning(WARN_REFUSED)
    c.record_warning(WARN_REFUSED)
    c.record_warning(WARN_SLOW_PLAN)
    c.record_outcome(True)
    c.record_outcome(False)
    c.record_outcome(True)
    c.record_capacity(planned=False)
    c.record_capacity(planned=True)
    c.record_capacity(planned=False)
    c.record_capacity(planned=True)


def test_counts_accumulate_over_calls():
    c = OwnerLaneCounters(num_lanes=4)
    record_some(c)
    assert c.as_dict() == {
        "load_backs": 2, "refused": 1, "plans": 0, "capacity_plans": 2, "capacity_fallbacks": 2,
        "leaves_scanned": 0, "leaves_evicted": 3,
        "pages_evicted_per_lane": [1, 3, 3, 0], "warnings": {WARN_REFUSED: 2, WARN_SLOW_PLAN: 1},
    }  # fmt: skip
    snapshot = c.as_dict()
    snapshot["pages_evicted_per_lane"][0] = 99
    snapshot["warnings"].clear()
    assert c.pages_evicted_per_lane[0] == 1 and c.warnings  # as_dict hands out copies


def test_the_prometheus_mirror_carries_the_collectors_labels_and_skips_zero_increments():
    c, coll = OwnerLaneCounters(num_lanes=4), collector()
    c.bind_collector(coll)
    record_some(c)
    assert [sample(EVICTED, coll, lane=str(lane)) for lane in range(4)] == [1.0, 3.0, 3.0, None]  # lane 3: no series
    assert sample(WARNINGS, coll, reason=WARN_REFUSED) == 2.0 and sample(WARNINGS, coll, reason=WARN_SLOW_PLAN) == 1.0
    assert sample(LOAD_BACKS, coll, outcome="loaded") == 2.0 and sample(LOAD_BACKS, coll, outcome="refused") == 1.0
    assert sample(CAPACITY, coll, by="owner_lanes") == 2.0 and sample(CAPACITY, coll, by="upstream") == 2.0
    docs = {family.name: family.documentation for family in REGISTRY.collect()}
    assert docs["sglang:cp_owner_lane_evicted_pages"] == (
        "Device pages freed by owner-lane eviction for HiCache load-back, per owner lane."
    )
    assert docs["sglang:cp_owner_lane_warnings"] == (
        "Owner-lane load-back warnings (slow planning, short eviction, refused load)."
    )
    assert docs["sglang:cp_owner_lane_load_backs"] == "HiCache load-backs under page-owner residency, by outcome."
    assert docs["sglang:cp_owner_lane_capacity_evictions"] == (
        "Prefill/decode capacity deficits under page-owner residency, by who chose the victims."
    )


def test_a_second_cache_shares_the_registered_metric():
    """Two caches (two schedulers' worth) with the same label names: one metric, two label sets."""
    first, second = OwnerLaneCounters(num_lanes=2), OwnerLaneCounters(num_lanes=2)
    a, b = collector(), collector()
    first.bind_collector(a)
    second.bind_collector(b)
    first.record_outcome(True)
    second.record_outcome(True)  # registering the metric again would raise "Duplicated timeseries"
    second.record_outcome(True)
    assert sample(LOAD_BACKS, a, outcome="loaded") == 1.0 and sample(LOAD_BACKS, b, outcome="loaded") == 2.0


def test_without_a_collector_nothing_reaches_prometheus():
    def series():
        return {
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for fam in REGISTRY.collect()
            for s in fam.samples
            if fam.name.startswith("sglang:cp_owner_lane")
        }

    before = series()
    c = OwnerLaneCounters(num_lanes=4)
    record_some(c)
    assert series() == before and c.load_backs == 2


def test_counters_of_a_cache_the_patch_never_touched_is_none():
    assert counters_of(SimpleNamespace()) is None
    assert counters_of(SimpleNamespace(_cp_owner_lanes=None)) is None
    state = SimpleNamespace(counters=OwnerLaneCounters(num_lanes=2))
    assert counters_of(SimpleNamespace(_cp_owner_lanes=state)) is state.counters


def test_plans_accumulate_and_a_plan_at_the_threshold_is_not_slow():
    c = OwnerLaneCounters(num_lanes=2)
    with_deficit = SimpleNamespace(deficit=[1, 0], scanned=5)
    without = SimpleNamespace(deficit=[0, 0], scanned=9)  # nothing to cover: not a plan, its scan not counted
    assert c.record_plan(with_deficit, plan_ms=2.0, slow_ms=2.0) is False  # at the threshold: not slow
    assert c.record_plan(with_deficit, plan_ms=1.0, slow_ms=2.0) is False
    assert c.record_plan(without, plan_ms=3.0, slow_ms=2.0) is True  # slower than the threshold
    assert (c.plans, c.leaves_scanned) == (2, 10)
    assert c.warnings == {WARN_SLOW_PLAN: 1}
    c.record_outcome(False)
    c.record_outcome(False)
    assert (c.load_backs, c.refused) == (0, 2)
