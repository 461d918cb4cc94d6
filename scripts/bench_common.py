"""What every benchmark under scripts/ shares: its output flags and how it writes them.

Every benchmark takes ``--quick`` (a smaller run, for CI's ci_slow tier and a first look),
``--json FILE`` (the results) and ``--png FILE`` (a chart, where a curve says more), and writes
files only where told: nothing lands in the current directory by default.
Cost: none beyond the writes asked for.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path


def add_output_flags(parser: argparse.ArgumentParser, quick: str, png: str | None = "a chart of the results") -> None:
    """``--quick`` (``quick`` says what it shrinks), ``--json FILE`` and, where the benchmark draws one, ``--png FILE``."""
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON to FILE")
    if png is not None:
        parser.add_argument("--png", type=Path, metavar="FILE", help=f"write {png} to FILE")


def require_sglang(spec: str, benchmark: str, instead: str) -> None:
    """Exit with a clear message, before importing sglang, when the installed release is outside ``spec``
    (the release whose classes the benchmark drives); ``instead`` says what to run there."""
    import importlib.metadata

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    try:
        found = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        found = None
    if found is None or not SpecifierSet(spec).contains(Version(found), prereleases=True):
        raise SystemExit(
            f"{benchmark} drives sglang{spec}'s classes; this environment has "
            f"{'sglang ' + found if found else 'no sglang'}. {instead}"
        )


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate of ``successes`` in ``n`` (sound at small n and near 0 or 1)."""
    if n == 0:
        return (0.0, 1.0)
    p, d = successes / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, centre - half), min(1.0, centre + half))


def log_ratio_band(aa: list[float]) -> float:
    """The A/A band: the largest departure of a same-code ratio from 1, as |ln r|."""
    return max((abs(math.log(r)) for r in aa), default=0.0)


def ratio_verdict(ab: list[float], aa: list[float], better: str) -> dict:
    """The median A/B ratio against the A/A band; ``worse`` says whether a departure is against the overlay."""
    med = statistics.median(ab)
    band = log_ratio_band(aa)
    excess = abs(math.log(med)) - band
    worse = med < 1 if better == "higher" else med > 1
    out = {"ab_median": round(med, 4), "ab_range": [round(min(ab), 4), round(max(ab), 4)],
           "aa_range": [round(min(aa), 4), round(max(aa), 4)], "aa_band": [round(math.exp(-band), 4),
           round(math.exp(band), 4)]}  # fmt: skip
    if excess <= 0:
        out["verdict"] = "inside the A/A band"
    else:
        side = "overlay worse" if worse else "overlay better"
        out["verdict"] = f"outside it by {math.exp(excess) - 1:.1%} ({side})"
    return out


def write_json(path: Path | None, data: dict) -> Path | None:
    """Write ``data`` to ``path`` (parents created); nothing when no path was given."""
    if path is None:
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def write_outputs(args: argparse.Namespace, result: dict, say, draw=None) -> None:
    """``--json`` and ``--png`` as asked (``draw(path)`` makes the chart); ``say`` reports each file written."""
    if write_json(args.json, result):
        say(f"wrote {args.json}")
    if getattr(args, "png", None) and draw is not None:
        draw(args.png)
        say(f"wrote {args.png}")
