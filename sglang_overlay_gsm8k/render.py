"""A run's summary as a table, a Markdown report and two PNGs (``report`` scores and judges; this shows).

Invariant: reads the summary and the records only, never decides. Cost: linear in the records; the PNGs need
matplotlib (the gsm8k extra), imported where drawn.
"""

from __future__ import annotations

from pathlib import Path

from sglang_overlay_gsm8k.report import Record

_ROWS = [
    ("accuracy", "accuracy", "{:.3f}"),
    ("correct", "correct", "{}"),
    ("invalid rate", "invalid", "{:.3f}"),
    ("invalid (no number)", "invalid_count", "{}"),
    ("errors", "error_count", "{}"),
    ("retries", "retry_count", "{}"),
    ("latency p50 (s)", "latency_p50_s", "{:.3f}"),
    ("latency p90 (s)", "latency_p90_s", "{:.3f}"),
    ("latency p99 (s)", "latency_p99_s", "{:.3f}"),
    ("output tokens/s", "output_tokens_per_s", "{:.1f}"),
    ("requests/s", "requests_per_s", "{:.2f}"),
    ("wall time (s)", "wall_s", "{:.2f}"),
]


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    rows = []
    for label, key, fmt in _ROWS:
        value = summary.get(key)
        rows.append((label, "n/a" if value is None else fmt.format(value)))
    for kind, count in summary["errors"].items():
        rows.append((f"  errors: {kind}", str(count)))
    for kind, count in summary["retries"].items():
        rows.append((f"  retried after: {kind}", str(count)))
    return rows


def print_table(summary: dict, console) -> None:
    from rich.table import Table

    cfg = summary["config"]
    table = Table(title=f"GSM8K {cfg.get('mode')} · {summary['num_questions']} questions · {cfg.get('model')}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for label, value in summary_rows(summary):
        table.add_row(label, value)
    console.print(table)


def markdown(summary: dict, records: list[Record], verdict_line: str | None) -> str:
    cfg = summary["config"]
    lines = [f"# GSM8K: {summary['accuracy']:.3f} on {summary['num_questions']} questions", ""]
    lines += [
        f"- server: `{cfg.get('base_url')}`, model `{cfg.get('model')}`, mode `{cfg.get('mode')}`"
        f"{' (streamed)' if cfg.get('stream') else ''}",
        f"- {cfg.get('num_shots')} shots from the train split, temperature {cfg.get('temperature')}, "
        f"max tokens {cfg.get('max_tokens')}, parallel {cfg.get('parallel')}",
        f"- questions: {cfg.get('selection')}; data {cfg.get('data_source', 'of unrecorded source')}, "
        f"sha256 `{str(cfg.get('data_sha256'))[:16]}`",
        f"- started {cfg.get('started_at')}",
        "",
    ]
    if verdict_line:
        lines += [f"**{verdict_line}**", ""]
    lines += ["| metric | value |", "|---|---:|"]
    lines += [f"| {label.strip()} | {value} |" for label, value in summary_rows(summary)]
    for title, pick in (
        ("Wrong", lambda r: r.error is None and not r.correct and r.extracted_by != "invalid"),
        ("Invalid (no number)", lambda r: r.extracted_by == "invalid"),
        ("Failed requests", lambda r: r.error is not None),
    ):
        chosen = [r for r in records if pick(r)]
        if chosen:
            shown = ", ".join(f"{r.id}" + (f" ({r.error})" if r.error else "") for r in chosen[:100])
            more = f" and {len(chosen) - 100} more" if len(chosen) > 100 else ""
            lines += ["", f"## {title}: {len(chosen)}", "", f"Question ids: {shown}{more}"]
    return "\n".join(lines) + "\n"


def plot(out_dir: Path, records: list[Record], summary: dict, baseline: dict | None) -> list[Path]:
    """accuracy.png (running accuracy over question position) and latency.png (matplotlib: the gsm8k extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    running, correct = [], 0
    for k, r in enumerate(records, 1):
        correct += r.correct
        running.append(correct / k)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(range(1, len(records) + 1), running, label="running accuracy")
    ax.axhline(summary["accuracy"], color="grey", linestyle=":", label=f"final {summary['accuracy']:.3f}")
    if baseline is not None:
        ax.axhline(baseline["accuracy"], color="tab:red", linestyle="--", label=f"baseline {baseline['accuracy']:.3f}")
    ax.set_xlabel("questions answered (in question order)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right")
    ax.set_title(f"GSM8K running accuracy ({summary['num_questions']} questions)")
    fig.tight_layout()
    fig.savefig(out_dir / "accuracy.png", dpi=100)
    plt.close(fig)
    written.append(out_dir / "accuracy.png")
    latencies = [r.latency_s for r in records if r.error is None and r.latency_s is not None]
    fig, ax = plt.subplots(figsize=(8, 4))
    if latencies:
        ax.hist(latencies, bins=min(50, max(5, len(latencies) // 10)))
        for key, style in (("latency_p50_s", ":"), ("latency_p99_s", "--")):
            if summary.get(key) is not None:
                ax.axvline(summary[key], color="tab:red", linestyle=style, label=f"{key[8:11]} {summary[key]:.3f} s")
        ax.legend()
    ax.set_xlabel("request latency (s), successful requests")
    ax.set_ylabel("requests")
    ax.set_title("GSM8K request latency")
    fig.tight_layout()
    fig.savefig(out_dir / "latency.png", dpi=100)
    plt.close(fig)
    written.append(out_dir / "latency.png")
    return written
