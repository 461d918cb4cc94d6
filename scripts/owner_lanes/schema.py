"""One JSON schema per owner-lane benchmark, the same on every pin; rows and results are built only through it.

A per-size row has the shared keys and each sided figure twice (``<figure>_patch``, ``<figure>_upstream``),
plus ``not_measured`` ({key: why}) and ``release_detail`` (what only that release's adapter reports). A
figure a release cannot measure is ``None`` with its reason in ``not_measured``, never missing.
:func:`size_row` and :func:`result` refuse a key the schema lacks and a key it names that is absent, so
``--json`` has the same top-level keys and the same per-size keys on every release folder's adapter (today unified, sglang 0.5.23).

    row = size_row(LOAD_BACK, {**sides(LOAD_BACK, patch.figures(), upstream.figures()), ...}, not_measured, detail)

Invariant: a row's keys are exactly ``schema.size``; a result's exactly ``schema.top``.
Cost: a set comparison per row.
"""

from __future__ import annotations

from typing import NamedTuple

# what a Tally (owner_lanes.tally) calls each sided figure
_TALLY_EVICTED = {
    "deficit_pages": "deficit_pages",
    "pages_evicted_short_lanes": "short_pages",
    "pages_evicted_per_deficit_page": "short_per_deficit_page",
    "pages_evicted_nonshort": "nonshort_unit_pages",
    "pages_evicted_nonshort_lanes": "nonshort_lane_pages",
    "nodes_evicted": "nodes_evicted",
}
_TALLY_TIME = {
    "time_per_call_ms": "time_ms_median",
    "time_per_call_ms_mean": "time_ms_mean",
    "cpu_ms_per_call": "cpu_ms_median",
}
_TALLY_LOAD_BACK = {
    "coverable_loads": "coverable",
    "loaded": "served",
    "success_rate": "success_rate",  # on coverable loads
    **_TALLY_EVICTED,
    "loads_without_deficit": "calls_without_deficit",
    "pages_evicted_on_loads_without_deficit": "evicted_without_deficit",
    **_TALLY_TIME,
}
_TALLY_CAPACITY = {"admitted": "served", "admission_rate": "served_rate", **_TALLY_EVICTED, **_TALLY_TIME}
_TOP = ("benchmark", "sglang", "release", "timed_call", "upstream_path", "workload", "device", "quick", "seed",
        "shard_size", "page_size")  # fmt: skip
_ROW_TAIL = ("not_measured", "release_detail")


class Schema(NamedTuple):
    benchmark: str
    top: tuple  # top-level keys
    from_tally: dict  # sided figure -> the Tally's name for it
    sided: tuple  # every sided figure (a row holds <figure>_patch and <figure>_upstream)
    shared: tuple  # keys of a row that have no side

    @property
    def size(self) -> tuple:
        return (*self.shared, *(f"{f}_{s}" for f in self.sided for s in ("patch", "upstream")), *_ROW_TAIL)


LOAD_BACK = Schema(
    "owner_lanes_load_back",
    (*_TOP, "loads_per_tree", "sizes", "release_detail"),
    _TALLY_LOAD_BACK,
    (*_TALLY_LOAD_BACK, "host_syncs_per_load"),
    ("leaves", "loads", "build_s", "speedup_end_to_end", "speedup_end_to_end_cpu", "planning_ms_patch",
     "index_build_ms_patch", "tensor_ops_planning", "host_syncs_planning"),
)  # fmt: skip
CAPACITY = Schema(
    "owner_lanes_capacity",
    (*_TOP, "calls_per_tree", "sizes", "release_detail"),
    _TALLY_CAPACITY,
    tuple(_TALLY_CAPACITY),
    ("leaves", "calls", "build_s", "speedup_end_to_end", "speedup_end_to_end_cpu", "index_build_ms_patch",
     "tensor_ops_planning", "host_syncs_planning", "capacity_plans_patch", "capacity_fallbacks_patch"),
)  # fmt: skip


def sides(schema: Schema, patch: dict, upstream: dict) -> dict:
    """The row's Tally-measured sided figures: ``<figure>_patch`` / ``<figure>_upstream``, and the speedups."""
    out = {}
    for figure, name in schema.from_tally.items():
        out[f"{figure}_patch"], out[f"{figure}_upstream"] = patch[name], upstream[name]
    out["speedup_end_to_end"] = ratio(upstream["time_ms_median"], patch["time_ms_median"])
    out["speedup_end_to_end_cpu"] = ratio(upstream["cpu_ms_median"], patch["cpu_ms_median"])
    return out


def ratio(a, b):
    return None if a is None or not b else a / b


def _exact(what: str, keys, wanted) -> None:
    missing, extra = [k for k in wanted if k not in keys], [k for k in keys if k not in wanted]
    if missing or extra:
        raise ValueError(f"{what}: keys missing from the schema's {missing}, keys the schema lacks {extra}")


def size_row(schema: Schema, figures: dict, not_measured: dict, detail: dict) -> dict:
    """A per-size row in the schema's order; every key of ``not_measured`` is None in it.

    Raises:
        ValueError: ``figures`` holds a key the schema lacks or lacks one it names (``not_measured``'s
            keys count as present), or a key is both measured and ``not_measured``.
    """
    both = [k for k in not_measured if figures.get(k) is not None]
    if both:
        raise ValueError(f"{schema.benchmark}: measured and also said not measured: {both}")
    row = {**figures, **dict.fromkeys(not_measured), "not_measured": dict(not_measured), "release_detail": detail}
    _exact(f"{schema.benchmark} row", row, schema.size)
    return {k: row[k] for k in schema.size}


def result(schema: Schema, **top) -> dict:
    """The benchmark's JSON: ``top`` in the schema's order, ``benchmark`` filled in.

    Raises:
        ValueError: a top-level key the schema lacks, or one it names that is absent.
    """
    top = {"benchmark": schema.benchmark, **top}
    _exact(f"{schema.benchmark} result", top, schema.top)
    return {k: top[k] for k in schema.top}
