"""What this process's overlay declares, and its info metric on SGLang's ``/metrics``.

:func:`declared` is the overlay as a process runs it (version, pin, lock digest, installed sglang, enabled
patches, strictness): what ranks compare (``cluster-consistency``) and what :func:`publish` puts on
``/metrics`` as ``sglang_overlay_info{version, pin, sglang, lock_digest, strict, patches, role} 1``, the
ecosystem's info-metric shape, so a PromQL query counts replicas by build.

Invariants: ``prometheus_client`` is imported only where SGLang's multiprocess set-up is already in place
(``PROMETHEUS_MULTIPROC_DIR`` set: its value class is chosen at that import, so an earlier import would
break upstream's own metrics); the gauge is written to the same directory as upstream's, so the HTTP
process's ``/metrics`` carries every process's series (``multiprocess_mode="max"``: one series per label set,
no pid). Cost: one lock read and one gauge write per process, once; nothing where metrics are off.
"""

from __future__ import annotations

import hashlib
import os

from sglang_overlay.core import installed, lockfile, settings
from sglang_overlay.core.registry import discover_patches
from sglang_overlay.version import __version__

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"  # set by SGLang (set_prometheus_multiproc_dir) under --enable-metrics
METRIC = "sglang_overlay_info"
LABELS = ("version", "pin", "sglang", "lock_digest", "strict", "patches", "role")
_PUBLISHED: dict = {}


def declared(skipped: tuple[str, ...] = ()) -> dict:
    """The overlay this process runs: enabled patches less those ``skipped`` here (non-strict)."""
    path = lockfile.lock_path()
    pin = lockfile.read_pin(path)
    disabled = set(settings.disabled_patch_ids()) | set(skipped)
    patches = discover_patches(pin.version, extra=tuple(settings.extra_patch_modules()))
    return {
        "overlay": __version__,
        "sglang": installed.installed_sglang_version(),
        "pin": pin.version,
        "lock": "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16],
        "patches": sorted(p.id for p in patches if p.id not in disabled),
        "strict": settings.strict(),
    }


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
    gauge.labels(**labels(declared(skipped), role.split(":")[0])).set(1)  # tokenizer_worker:<pid>: one series
    _PUBLISHED["gauge"] = gauge
    return True
