"""The owner-lane counters on upstream's Prometheus metrics (sglang >= 0.5.23): a cache built as
``--enable-metrics`` builds it mirrors every load-back and every owner-lane eviction, under the labels of
upstream's own metrics collector; without metrics, nothing is published (the counters stay in-process)."""

from __future__ import annotations

import pytest

from tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu import Harness
from tests.patches.cp_hicache_owner_lanes.unified.load_back_oracles import short_lane_2


@pytest.fixture(scope="module", autouse=True)
def hook(gate_hook):
    """The load-back hook (conftest.py's ``gate_hook``) for every test here."""


def test_counters_reach_prometheus_with_metrics_enabled():
    from prometheus_client import REGISTRY
    from sglang.srt.runtime_context import get_parallel

    with get_parallel().override(tp_rank=0, pp_rank=0):  # the labels of upstream's collector: this rank's
        h = Harness(enable_metrics=True)
    assert h.cache.metrics_collector is not None
    labels = {k: str(v) for k, v in h.cache.metrics_collector.labels.items()}  # as Prometheus keeps them

    def sample(name, **extra):
        return REGISTRY.get_sample_value(name, {**labels, **extra}) or 0.0

    node = short_lane_2(h)
    before = {lane: sample("sglang:cp_owner_lane_evicted_pages_total", lane=str(lane)) for lane in range(4)}
    loads = sample("sglang:cp_owner_lane_load_backs_total", outcome="loaded")
    assert h.load(node) == (True, h.ps)
    after = {lane: sample("sglang:cp_owner_lane_evicted_pages_total", lane=str(lane)) for lane in range(4)}
    assert {lane: after[lane] - before[lane] for lane in range(4)} == {0: 0, 1: 0, 2: 1, 3: 0}
    assert sample("sglang:cp_owner_lane_load_backs_total", outcome="loaded") == loads + 1


def test_without_metrics_the_counters_stay_in_process():
    from sglang_overlay.patches.cp_hicache_owner_lanes.counters import counters_of

    h = Harness()
    assert getattr(h.cache, "metrics_collector", None) is None
    assert h.load(short_lane_2(h)) == (True, h.ps)
    counters = counters_of(h.cache)
    assert counters.load_backs == 1 and counters.pages_evicted_per_lane == [0, 0, 1, 0]
    assert counters._collector is None
