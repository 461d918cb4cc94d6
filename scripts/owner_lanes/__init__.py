"""The owner-lane benchmarks' per-release adapters (patch cp-hicache-owner-lanes), chosen through the registry.

``scripts/bench_owner_lanes.py`` (load-back) and ``scripts/bench_capacity.py`` (prefill/decode capacity
eviction) drive the release folder that serves the installed sglang: ``discover_patches(ANY_UPSTREAM)`` -> the
patch -> ``release_for(version)`` -> ``Release.folder`` (today "unified") -> the module of that name
here. Every adapter has one shape: ``TIMED_CALL``, ``UPSTREAM_PATH``, ``WORKLOAD``, ``N``, ``PS``,
``NOT_MEASURED``, ``CHART_CURVES``, ``prepare(device)``, ``bench_size(release, leaves, loads, seed, device)``,
``release_detail(quick, seed, device)``, ``report_detail(console, result)``; and, where the release hooks
capacity eviction, ``CAPACITY_TARGET``, ``CAPACITY_UPSTREAM_PATH``, ``CAPACITY_WORKLOAD``,
``capacity_detail()`` and ``capacity_size(release, leaves, calls, seed, device)``. Each figure it returns goes
through ``schema``, so every pin writes the same keys.

    from owner_lanes import adapter_for, installed_release
    version, release = installed_release()   # SystemExit naming why, when no folder serves this sglang
    adapter = adapter_for(release)           # owner_lanes.unified on sglang 0.5.23

Invariant: nothing here imports sglang or torch; an adapter is imported only once chosen.
Cost: one import of the patch declarations.
"""

from __future__ import annotations

import importlib

PATCH_ID = "cp-hicache-owner-lanes"


def release_of(version: str | None):
    """The release folder of cp-hicache-owner-lanes serving sglang ``version``.

    Raises:
        SystemExit: no sglang (``version`` None), or no release folder of the patch serves ``version``.
    """
    from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches

    if version is None:
        raise SystemExit(f"the owner-lane benchmarks drive {PATCH_ID}'s release for the installed sglang: none here")
    (patch,) = [p for p in discover_patches(ANY_UPSTREAM) if p.id == PATCH_ID]
    release = patch.release_for(version)
    if release is None:
        folders = ", ".join(f"{r.folder} ({r.upstream})" for r in patch.releases)
        raise SystemExit(f"no release folder of {PATCH_ID} serves sglang {version} (folders: {folders})")
    return release


def installed_release():
    """``(version, Release)`` for the installed sglang (see :func:`release_of`)."""
    from sglang_overlay.core.installed import installed_sglang_version

    version = installed_sglang_version()
    return version, release_of(version)


def adapter_for(release):
    """The adapter module of ``release`` (``owner_lanes.<folder>``)."""
    return importlib.import_module(f"{__name__}.{release.folder}")


def hook_of(release, qualname: str):
    """The hook function the release declares for the target ``qualname`` (resolved from the registry)."""
    (target,) = [t for t in release.targets if t.qualname == qualname]
    return target.resolve_hook()
