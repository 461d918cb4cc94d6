"""The overlay's info metric on SGLang's ``/metrics``: what this process runs, one series per build and role.

:func:`publish` puts the overlay as a process runs it (``core.registry.declared_overlay``: what ranks compare
in ``cluster-consistency``) on ``/metrics`` as ``sglang_overlay_info{version, pin, sglang, lock_digest, strict, patches, role} 1``, the
ecosystem's info-metric shape, so a PromQL query counts replicas by build.

Invariants: ``prometheus_client`` is imported only where SGLang's multiprocess set-up is already in place
(``PROMETHEUS_MULTIPROC_DIR`` set: its value class is chosen at that import, so an earlier import would
break upstream's own metrics); the gauge is written to the same directory as upstream's, so the HTTP
process's ``/metrics`` carries every process's series (``multiprocess_mode="max"``: one series per label set,
no pid). Cost: one lock read and one gauge write per process, once; nothing where metrics are off.
"""

from __future__ import annotations

import os

from sglang_overlay.core.registry import declared_overlay

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"  # set by SGLang (set_prometheus_multiproc_dir) under --enable-metrics
METRIC = "sglang_overlay_info"
LABELS = ("version", "pin", "sglang", "lock_digest", "strict", "patches", "role")
_PUBLISHED: dict = {}


def labels(state: dict, role: str) -> dict[str, str]:
    return {
        "version": state["overlay"],
        "pin": state["pin"],
        "sglang": state["sglang"] or "",
        "lock_digest": state["lock"],
        "strict": "true" if state["strict"] else "false",
        "patches": ",".join(state["patches"]),
        "role": role,
    }


def publish(role: str, skipped: tuple[str, ...] = ()) -> bool:
    """Set this process's info series to 1 where SGLang serves metrics from it; False where it does not."""
    if not os.environ.get(MULTIPROC_DIR) or _PUBLISHED:
        return bool(_PUBLISHED)
    from prometheus_client import Gauge

    gauge = Gauge(
        METRIC,
        "The sglang-overlay this process runs (value 1): overlay version, upstream pin, installed sglang, "
        "lock digest, strictness, enabled patches and process role.",
        labelnames=LABELS,
        multiprocess_mode="max",
    )
    gauge.labels(**labels(declared_overlay(skipped), role.split(":")[0])).set(1)  # tokenizer_worker:<pid>: one series
    _PUBLISHED["gauge"] = gauge
    return True
