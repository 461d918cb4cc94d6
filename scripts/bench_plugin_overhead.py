#!/usr/bin/env python3
"""What the overlay adds to SGLang's plugin start-up.

Runs fresh interpreters doing exactly what every SGLang process does
(``from sglang.srt.plugins import load_plugins; load_plugins()``), with the
overlay installed and enabled vs skipped (``SGLANG_PLUGINS`` naming another
plugin), interleaved, and reports the median wall time and peak RSS of each,
the modules the overlay made the process import, and whether any of them is a
patch-target module (the lazy-application goal: none).

    .venv/bin/python scripts/bench_plugin_overhead.py --runs 5 --json out/plugin_overhead.json

Goal: overhead_ratio < 1.05 and extra_modules_imported == [].
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import add_output_flags, write_json  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from sglang.srt.plugins import load_plugins

load_plugins()
wall = time.perf_counter() - t0
app = sys.modules.get("sglang_overlay.core.hooking")
print("BENCH" + json.dumps({"wall_s": wall, "overlay_apply_s": app.status()["apply_s"] if app else 0.0, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                            "modules": sorted(sys.modules)}))
"""


def run_once(enabled: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_")}
    env["SGLANG_PLUGINS"] = "sglang_overlay" if enabled else "__overlay_skipped__"
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({'overlay' if enabled else 'disabled'}):\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH")][-1]
    return json.loads(line[5:])


def target_modules() -> set[str]:
    sys.path.insert(0, str(REPO))
    from sglang_overlay.core.lockfile import read_pin
    from sglang_overlay.core.registry import discover_patches

    return {m for p in discover_patches(read_pin().version) for m in p.modules}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=None, help="fresh interpreters per mode (median reported; default 5, --quick 2)"
    )
    add_output_flags(parser, quick="2 interpreters per mode instead of 5", png=None)
    args = parser.parse_args(argv)
    args.runs = args.runs or (2 if args.quick else 5)

    results = {True: [], False: []}
    for i in range(args.runs):
        for enabled in (True, False) if i % 2 == 0 else (False, True):
            results[enabled].append(run_once(enabled))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "peak_rss_mb")} for k, v in results.items()}
    extra_all = sorted(set(results[True][0]["modules"]) - set(results[False][0]["modules"]))
    targets = target_modules()
    extra_targets = sorted(m for m in extra_all if m in targets)
    ratio = med[True]["wall_s"] / med[False]["wall_s"]
    own = statistics.median(r["overlay_apply_s"] for r in results[True])
    out = {
        "runs": args.runs,
        "overlay": med[True],
        "disabled": med[False],
        "overhead_ratio": ratio,
        "overlay_apply_s": own,
        "overlay_apply_fraction": own / med[False]["wall_s"],
        "rss_ratio": med[True]["peak_rss_mb"] / med[False]["peak_rss_mb"],
        "extra_modules_imported": extra_targets,
        "extra_modules_all": extra_all,
        "patch_target_modules": sorted(targets),
    }
    table = Table(title=f"load_plugins() in a fresh interpreter, median of {args.runs}")
    for col in ("mode", "wall s", "peak RSS MiB"):
        table.add_column(col)
    table.add_row("overlay enabled", f"{med[True]['wall_s']:.3f}", f"{med[True]['peak_rss_mb']:.1f}")
    table.add_row("overlay skipped", f"{med[False]['wall_s']:.3f}", f"{med[False]['peak_rss_mb']:.1f}")
    console = Console()
    console.print(table)
    console.print(f"modules the overlay added: {len(extra_all)} (its own: {', '.join(extra_all) or 'none'})")
    console.print(
        f"the overlay's own apply(): {own * 1000:.1f} ms ({100 * own / med[False]['wall_s']:.2f}% of load_plugins)"
    )
    console.print(f"patch-target modules imported by the overlay: {extra_targets or 'none'}")
    write_json(args.json, out)
    console.print(f"overhead_ratio = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
