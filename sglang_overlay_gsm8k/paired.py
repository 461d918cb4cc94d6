"""The paired verdict: two runs over the same questions, compared question by question.

A is the run at ``--base-url``; B is the ``--against`` server's run (asked in the same process, at the same
time) or a saved run (``--paired-with DIR``). Per question answered on both sides (a failed request on
either side leaves the question out, counted in ``excluded``) the 2x2 table of correctness is
``both_correct``, ``a_only``, ``b_only``, ``both_wrong``; ``flipped`` lists the questions whose correctness
differs (``a_only`` + ``b_only``), ``changed`` those whose extracted answer differs (a superset: two wrong
answers can differ too). ``mcnemar_p`` is McNemar's exact test, two-sided, on the discordant pairs: under
"A and B are equally accurate" each discordant question is a fair coin, so
``p = min(1, 2 * P[Binomial(a_only + b_only, 1/2) <= min(a_only, b_only)])`` (1.0 without discordant pairs).

Verdict (exit codes as for one run): 2 when either side is incomplete (see ``report.verdict``), 1 when B is
worse than A (``b_only < a_only`` and ``mcnemar_p < alpha``) or more answers changed than ``max_flips``
allows (``--max-flips 0``: a patch that should change nothing under greedy decoding changed something), else 0.

Invariants: counts are over the same question ids in the same order on both sides (``pair`` refuses
anything else); nothing here does I/O except ``load_saved``. Cost: linear in the questions; the exact test
is a sum of at most n/2 binomial terms in exact integers.
"""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

from sglang_overlay_gsm8k.report import INCOMPLETE, PASS, REGRESSION, Record


class PairingError(ValueError):
    """The two runs cannot be paired (other questions, other data, an unreadable saved run)."""


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value of ``a_only`` against ``b_only`` discordant pairs."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    k = min(a_only, b_only)
    tail = sum(comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**n)


def _answer(r: Record) -> dict:
    return {"answer": r.prediction, "correct": r.correct, "extracted_by": r.extracted_by}


def pair(a: list[Record], b: list[Record]) -> dict:
    """The ``paired`` object of summary.json for records of the same questions in the same order."""
    if [r.id for r in a] != [r.id for r in b]:
        raise PairingError("the two runs did not ask the same questions in the same order")
    both = [(x, y) for x, y in zip(a, b) if x.error is None and y.error is None]
    counts = {"both_correct": 0, "a_only": 0, "b_only": 0, "both_wrong": 0}
    flipped, changed, same = [], [], 0
    for x, y in both:
        key = (
            "both_correct"
            if x.correct and y.correct
            else "a_only"
            if x.correct
            else "b_only"
            if y.correct
            else "both_wrong"
        )
        counts[key] += 1
        entry = {"index": x.id, "gold": x.gold, "a": _answer(x), "b": _answer(y)}
        if x.correct != y.correct:
            flipped.append(entry)
        if x.prediction == y.prediction:
            same += 1
        else:
            changed.append(entry)
    n = len(both)
    return {
        "n": n,
        **counts,
        "agreement": same / n if n else 1.0,
        "same_answer": same,
        "mcnemar_p": mcnemar_exact(counts["a_only"], counts["b_only"]),
        "flipped": flipped,
        "changed": changed,
        "excluded": len(a) - n,
    }


def verdict(paired: dict, a_code: int, b_code: int, alpha: float, max_flips: int | None) -> tuple[int, str]:
    """(exit code, reason) of a paired run; ``a_code``/``b_code`` are the single-run verdicts' codes."""
    table = (
        f"{paired['n']} paired: both correct {paired['both_correct']}, A only {paired['a_only']}, "
        f"B only {paired['b_only']}, both wrong {paired['both_wrong']}; McNemar p {paired['mcnemar_p']:.4g}; "
        f"{len(paired['changed'])} answer(s) changed"
    )
    if INCOMPLETE in (a_code, b_code):
        side = "A" if a_code == INCOMPLETE else "B"
        return INCOMPLETE, f"INCOMPLETE: run {side} did not complete; the pairing is not a verdict ({table})"
    reasons = []
    if paired["b_only"] < paired["a_only"] and paired["mcnemar_p"] < alpha:
        reasons.append(f"B is worse than A (p {paired['mcnemar_p']:.4g} < --alpha {alpha:g})")
    if max_flips is not None and len(paired["changed"]) > max_flips:
        shown = ", ".join(str(c["index"]) for c in paired["changed"][:20])
        reasons.append(
            f"{len(paired['changed'])} answer(s) changed, more than --max-flips {max_flips} "
            f"(questions {shown}{', ...' if len(paired['changed']) > 20 else ''})"
        )
    if reasons:
        return REGRESSION, "FAIL: " + "; ".join(reasons) + f" ({table})"
    return PASS, f"PASS: no evidence B differs from A at --alpha {alpha:g} ({table})"


RECORD_FIELDS = tuple(Record.__dataclass_fields__)


def load_saved(directory: str, config: dict) -> tuple[dict, list[Record]]:
    """A saved run (``summary.json`` + ``results.jsonl`` of ``--output DIR``) that asked exactly the questions
    of ``config`` (same question set and data hash); PairingError otherwise."""
    root = Path(directory)
    try:
        summary = json.loads((root / "summary.json").read_text(encoding="utf-8"))
        lines = (root / "results.jsonl").read_text(encoding="utf-8").splitlines()
        records = [Record(**{k: row[k] for k in RECORD_FIELDS}) for row in map(json.loads, filter(None, lines))]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PairingError(
            f"--paired-with {directory}: not a saved run of this runner (summary.json and results.jsonl): {exc}"
        ) from exc
    saved = summary.get("config", {}) if isinstance(summary, dict) else {}
    for key, what in (("data_sha256", "data hash"), ("question_set", "question set")):
        if saved.get(key) != config.get(key):
            raise PairingError(
                f"--paired-with {directory}: its {what} is {saved.get(key)!r}, this run's is "
                f"{config.get(key)!r}; pair runs of the same questions (same --num-questions or "
                "--sample and --seed, same data)"
            )
    return summary, records


def _rows(p: dict) -> list[tuple[str, str, str]]:
    return [
        ("A correct", str(p["both_correct"]), str(p["a_only"])),
        ("A wrong", str(p["b_only"]), str(p["both_wrong"])),
    ]


def print_table(p: dict, console) -> None:
    from rich.table import Table

    table = Table(
        title=f"paired: {p['n']} questions answered by both · McNemar p {p['mcnemar_p']:.4g} · "
        f"agreement {p['agreement']:.3f}"
    )
    for col in ("", "B correct", "B wrong"):
        table.add_column(col, justify="right")
    for row in _rows(p):
        table.add_row(*row)
    console.print(table)


def markdown(summary: dict) -> str:
    """The paired section of report.md: the 2x2 table, the flipped and the changed questions."""
    p, b = summary["paired"], summary["b"]
    where = b.get("source") or b.get("config", {}).get("base_url")
    lines = [
        "",
        "## Paired A/B",
        "",
        f"- A: `{summary['config'].get('base_url')}`, accuracy {summary['accuracy']:.3f}",
        f"- B: `{where}`, accuracy {b['accuracy']:.3f}",
        f"- {p['n']} questions answered by both ({p['excluded']} left out: a failed request on a side); "
        f"same extracted answer on {p['same_answer']} (agreement {p['agreement']:.3f}); "
        f"McNemar exact p = {p['mcnemar_p']:.4g}",
        "",
        "| | B correct | B wrong |",
        "|---|---:|---:|",
    ]
    lines += [f"| {a} | {x} | {y} |" for a, x, y in _rows(p)]
    for title, key in (("Flipped (correct on one side only)", "flipped"), ("Changed answers", "changed")):
        entries = p[key]
        lines += ["", f"### {title}: {len(entries)}"]
        if entries:
            lines += ["", "| question | gold | A | B |", "|---:|---:|---:|---:|"]
            for e in entries[:200]:
                lines.append(
                    f"| {e['index']} | {e['gold']} | {e['a']['answer']}{' ✓' if e['a']['correct'] else ''} "
                    f"| {e['b']['answer']}{' ✓' if e['b']['correct'] else ''} |"
                )
            if len(entries) > 200:
                lines.append(f"| ... | {len(entries) - 200} more in summary.json | | |")
    return "\n".join(lines) + "\n"


def plot(path: Path, a: list[Record], b: list[Record]) -> Path:
    """paired.png: the running accuracy of A and B in question order, and the running count of discordant
    (flipped) questions on a second axis (matplotlib: the gsm8k extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_a, run_b, discordant = [], [], []
    ca = cb = flips = 0
    for k, (x, y) in enumerate(zip(a, b), 1):
        ca, cb = ca + x.correct, cb + y.correct
        flips += x.error is None and y.error is None and x.correct != y.correct
        run_a.append(ca / k)
        run_b.append(cb / k)
        discordant.append(flips)
    fig, ax = plt.subplots(figsize=(8, 4))
    xs = range(1, len(a) + 1)
    ax.plot(xs, run_a, label="A running accuracy")
    ax.plot(xs, run_b, label="B running accuracy", linestyle="--")
    ax.set_xlabel("questions (in question order)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    twin = ax.twinx()
    twin.step(xs, discordant, color="tab:red", where="post", label="flipped so far")
    twin.set_ylabel("flipped questions")
    lines = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(lines, [h.get_label() for h in lines], loc="lower right")
    ax.set_title(f"GSM8K paired A/B ({len(a)} questions, {flips} flipped)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
