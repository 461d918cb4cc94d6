"""A run's files: the answers on disk as they arrive (``results.jsonl`` for A, ``results_b.jsonl`` for B),
and everything a finished run writes (``write_outputs``).

Each finished question is appended to its side's file and flushed the moment it is scored, so a crash, a
kill or a Ctrl-C keeps every answer received; ``crashed`` then writes a ``summary.json`` marked
``"incomplete": true`` with the reason and the statistics of what was answered. A run that ends normally
rewrites both files in question order (``write_records``), so the journal's arrival order never
reaches a finished run's files.

Invariant: a record is on disk (flushed) before the next question's callback runs; without ``--output``
nothing is written. Cost: one JSON line and one flush per question (no fsync: a crash of the process, not of
the machine, is what this guards against).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from sglang_overlay_gsm8k import paired, render, report

FILES = ("results.jsonl", "results_b.jsonl")
# A lone surrogate (a JSON "\\ud800" escape a server may send) cannot be encoded as UTF-8; written as the
# same escape it stays valid JSON that reads back to the same text.
TEXT_OPTIONS = {"encoding": "utf-8", "errors": "backslashreplace"}


def record_line(r: report.Record) -> str:
    return json.dumps(asdict(r), ensure_ascii=False) + "\n"


def write_records(path: Path, records: list[report.Record]) -> None:
    """Replace ``path`` whole (written aside, then renamed): a crash mid-write leaves the journal's lines."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", **TEXT_OPTIONS) as fh:
        fh.writelines(record_line(r) for r in records)
    tmp.replace(path)


def write_outputs(
    out_dir: Path,
    summary: dict,
    records: list[report.Record],
    baseline: dict | None,
    verdict_line: str,
    b_records: list[report.Record] | None = None,
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_records(out_dir / "results.jsonl", records)
    written = [out_dir / "results.jsonl"]
    if b_records is not None and "source" not in summary.get("b", {}):  # a saved B stays where it is
        write_records(out_dir / "results_b.jsonl", b_records)
        written.append(out_dir / "results_b.jsonl")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = render.markdown(summary, records, verdict_line)
    if "paired" in summary:
        text += paired.markdown(summary)
    (out_dir / "report.md").write_text(text)
    written += [out_dir / "summary.json", out_dir / "report.md", *render.plot(out_dir, records, summary, baseline)]
    if b_records is not None:
        written.append(paired.plot(out_dir / "paired.png", records, b_records))
    return written


class Journal:
    def __init__(self, out_dir: Path | None):
        self.out_dir = out_dir
        self.files: list = []
        self.records: list[list[report.Record]] = []
        self.configs: list[dict] = []
        self.selected = 0
        self.t_start: float | None = None

    def start(self, configs: list[dict], selected: int, t_start: float) -> None:
        """Truncate one file per side (A, then B); nothing is open without an output directory."""
        self.configs, self.selected, self.t_start = configs, selected, t_start
        self.records = [[] for _ in configs]
        if self.out_dir is not None:
            self.files = [open(self.out_dir / name, "w", **TEXT_OPTIONS) for name in FILES[: len(configs)]]

    def append(self, side: int, record: report.Record) -> None:
        self.records[side].append(record)
        if self.files:
            self.files[side].write(record_line(record))
            self.files[side].flush()

    def close(self) -> None:
        for fh in self.files:
            fh.close()
        self.files = []

    def crashed(self, reason: str, now: float) -> Path | None:
        """Close the files and write summary.json for a run that did not finish; None without --output."""
        self.close()
        if self.out_dir is None:
            return None
        answered = self.records[0] if self.records else []
        wall = now - self.t_start if self.t_start is not None else 0.0
        summary = report.summarize(answered, wall, self.configs[0] if self.configs else {})
        summary.update(
            incomplete=True,
            num_questions_selected=self.selected,
            answered=[len(side) for side in self.records],
            verdict={"exit_code": report.INCOMPLETE, "reason": reason},
        )
        path = self.out_dir / "summary.json"
        path.write_text(json.dumps(summary, indent=2) + "\n")
        return path
