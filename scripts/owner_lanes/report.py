"""The owner-lane benchmarks' table and chart, drawn from the schema's keys alone: one view serves every pin.

A column is ``(title, key, format, sided)``; a sided column shows ``patch | upstream``; a figure a release does
not measure (None, see the row's ``not_measured``) shows as ``n/a``. The chart: median time per call on each
side (and the adapter's ``CHART_CURVES`` from the rows' ``release_detail``), and the pages each side evicted.

Invariant: reads the result only; writes only the file asked for. Cost: rich and, for ``--png``, matplotlib.
"""

from __future__ import annotations

_EVICTED = (
    ("short: evicted/deficit", "pages_evicted_per_deficit_page", "{:.2f}", True),
    ("no-short units: pages", "pages_evicted_nonshort", "{}", True),
    ("non-short lanes: pages", "pages_evicted_nonshort_lanes", "{}", True),
)
_TIME = (
    ("ms/call median", "time_per_call_ms", "{:.3f}", True),
    ("speedup", "speedup_end_to_end", "{:.1f}x", False),
    ("thread-CPU ms/call", "cpu_ms_per_call", "{:.3f}", True),
)
_PLANNING = (
    ("tensor ops plan", "tensor_ops_planning", "{}", False),
    ("syncs plan", "host_syncs_planning", "{}", False),
)
LOAD_BACK_COLUMNS = (
    ("leaves", "leaves", "{:,}", False),
    ("success (coverable)", "success_rate", "{:.0%}", True),
    *_EVICTED,
    *_TIME,
    ("plan ms", "planning_ms_patch", "{:.3f}", False),
    *_PLANNING,
    ("syncs/load", "host_syncs_per_load", "{:.1f}", True),
)
CAPACITY_COLUMNS = (
    ("leaves", "leaves", "{:,}", False),
    ("admitted", "admission_rate", "{:.0%}", True),
    *_EVICTED,
    ("nodes evicted", "nodes_evicted", "{}", True),
    *_TIME,
    *_PLANNING,
)


def cell(value, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def speedups(result: dict) -> str:
    """``upstream / patch`` time per call at each size, one line."""
    return ", ".join(
        f"{cell(r['speedup_end_to_end'], '{:.1f}x')} at {r['leaves']:,} leaves" for r in result["sizes"].values()
    )


def print_table(result: dict, columns):
    """The result's rows as a rich table (``patch | upstream`` in sided columns); returns the console."""
    from rich.console import Console
    from rich.table import Table

    per_tree = result.get("loads_per_tree", result.get("calls_per_tree"))
    table = Table(
        title=f"{result['benchmark']} on sglang {result['sglang']} ({result['release']}: {result['timed_call']}), "
        f"N={result['shard_size']}, page {result['page_size']}, {result['device']}, {per_tree} calls per tree; "
        "patch | upstream"
    )
    for title, *_ in columns:
        table.add_column(title, justify="right", no_wrap=True)
    for r in result["sizes"].values():
        table.add_row(
            *(
                f"{cell(r[key + '_patch'], fmt)} | {cell(r[key + '_upstream'], fmt)}" if sided else cell(r[key], fmt)
                for _, key, fmt, sided in columns
            )
        )
    console = Console(width=max(240, Console().width))
    console.print(table)
    console.print(f"upstream: {result['upstream_path']}\nworkload: {result['workload']}")
    reasons = {k: why for r in result["sizes"].values() for k, why in r["not_measured"].items()}
    for key, why in reasons.items():
        console.print(f"n/a {key}: {why}")
    return console


def write_png(result: dict, path, curves=()) -> None:
    """Time per call on each side (and ``curves``: (release_detail key, label)), and pages evicted per side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(result["sizes"].values())
    xs = [r["leaves"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10.4, 4.0))
    a.plot(xs, [r["time_per_call_ms_patch"] for r in rows], marker="o", label=f"patch: {result['timed_call']}")
    a.plot(xs, [r["time_per_call_ms_upstream"] for r in rows], marker="o", label=f"upstream: {result['upstream_path']}")
    if all(r["planning_ms_patch"] is not None for r in rows):
        a.plot(xs, [r["planning_ms_patch"] for r in rows], "--", marker="o", label="patch planning alone")
    for key, label in curves:
        a.plot(xs, [r["release_detail"][key] for r in rows], "--", marker="o", label=label)
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("evictable leaves")
    a.set_ylabel("median ms per call")
    a.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=7)
    w, pos = 0.35, list(range(len(rows)))
    for side, shift, color in (("patch", -w / 2, "tab:blue"), ("upstream", w / 2, "tab:orange")):
        short = [r[f"pages_evicted_short_lanes_{side}"] for r in rows]
        other = [r[f"pages_evicted_nonshort_{side}"] for r in rows]
        at = [i + shift for i in pos]
        b.bar(at, short, w, color=color, label=f"{side}: pages of short lanes")
        b.bar(at, other, w, bottom=short, color=color, alpha=0.35, hatch="//",
              label=f"{side}: pages of units holding no short lane")  # fmt: skip
    b.set_xticks(pos, [f"{x:,}" for x in xs])
    b.set_xlabel("evictable leaves")
    b.set_ylabel("pages evicted per tree")
    top = max(r[f"pages_evicted_short_lanes_{s}"] + r[f"pages_evicted_nonshort_{s}"] for r in rows
              for s in ("patch", "upstream"))  # fmt: skip
    b.set_ylim(0, max(1, top) * 1.7)  # room for the legend
    b.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{result['benchmark']}, sglang {result['sglang']} ({result['release']}), N={result['shard_size']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
