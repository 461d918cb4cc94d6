#!/usr/bin/env python3
"""What compacting CP dummy rows at the MoE boundary costs, against the MoE work it saves.

Patch ``moe-cp-compaction``. For dummy fractions 0%, 12%, 25% and 50% of a
rank's rows (interleaved through the batch, as lane-slot compute padding puts
them), on upstream's own ``DeepseekV2MoE`` of the installed pin (real gate, grouped
top-k, shared experts; 0.5.20 or 0.5.23, each with its own hook) with the CPU
stand-ins for DeepEP's dispatcher and experts from ``tests/support/moe_standins.py``
(the builder is the ``standins`` module of the release folder serving the installed sglang, under
``tests/patches/moe_cp_compaction/``; either runs on the CPU or on CUDA):

- ``moe_padded_s``: upstream ``forward_deepep`` fed every row, dummies included;
- ``moe_compact_s``: upstream ``forward_deepep`` on the valid rows alone;
- ``compaction_s``: the patch's own work, i.e. the real boundary hook around a
  body that does nothing: index preparation (once per forward, counted here on
  every call), gather, zero-filled scatter;
- ``patched_s``: the patched ``forward_deepep`` end to end on the padded rows (the pin's hook around
  upstream's function, as the installed wrapper calls it; no ``apply()``, so no process-start hook is
  needed, e.g. on the GPU check's device);
- ``net_speedup`` = ``moe_padded_s / patched_s``.

``identity_overhead_s`` is what the hook adds when there is nothing to compact.
On a CUDA device (``--device cuda``) the script also runs the real hook under
``torch.cuda.set_sync_debug_mode("error")`` with a sync-free body, which raises
on any host sync the boundary adds, and reports ``compaction_fraction``
(compaction over the patched MoE layer time).

``--boundary-only`` needs neither sglang nor rich (a host with torch alone, e.g. the GPU
check): per dummy fraction it times the boundary's own steps as ``forward_deepep`` runs them
on a forward with dummy rows (a new layout's device index, then per MoE layer one gather and
one zero-filled scatter, ``rows.compact_rows`` / ``restore_rows``), and on CUDA runs them
under ``set_sync_debug_mode("error")``. The MoE itself is not run.

    .venv/bin/python scripts/bench_moe_compaction.py --json out/moe_compaction.json --png out/moe_compaction.png
    .venv/bin/python scripts/bench_moe_compaction.py --quick       # 256 rows, 3 repeats: seconds
    python scripts/bench_moe_compaction.py --device cuda --hidden 7168 --inter 2048 --rows 4096 --dtype bf16

Flags shared with the other benchmarks: ``--quick`` (smaller defaults: 256 rows, 3 repeats,
200 identity repeats; explicit flags still win), ``--json FILE`` and ``--png FILE`` (files are
written only where these say). The exit status is 1 when the compact path is not faster at
25% and 50% dummy rows.

Goals: at 0% the patched boundary costs no measurable time over upstream; at 25%
and above the compact path is faster end to end (``net_speedup`` > 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_common import add_output_flags, require_sglang, write_json  # noqa: E402

FRACTIONS = (0.0, 0.12, 0.25, 0.5)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(variants: dict, device, repeats: int, warmup: int = 2) -> dict:
    """Seconds of each ``fn(prepare())`` (``prepare`` untimed), the minimum over the
    repeats: the variants take turns on every repeat and the minimum is the run least
    disturbed by other processes on a shared machine."""
    times = {name: [] for name in variants}
    for i in range(warmup + repeats):
        for name, (fn, prepare) in variants.items():
            arg = prepare()
            _sync(device)
            t0 = time.perf_counter()
            fn(arg)
            _sync(device)
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    return {name: min(t) for name, t in times.items()}


def nothing(self, hidden_states, forward_batch, input_ids_global=None):
    """A MoE body that costs nothing: what is left is the boundary's own work."""
    return hidden_states


def sync_free_body(self, hidden_states, forward_batch, input_ids_global=None):
    return hidden_states * 2


FULL = dict(rows=1024, repeats=7, identity_repeats=2000)
QUICK = dict(rows=256, repeats=3, identity_repeats=200)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_flags(
        parser,
        quick="smaller defaults (256 rows, 3 repeats): seconds",
        png="a chart of upstream's padded layer against the patched one",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--rows", type=int, default=None, help="CP-local rows of one rank (default 1024; --quick 256)")
    parser.add_argument("--hidden", type=int, default=1024, help="hidden size (DeepSeek-V3: 7168)")
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--inter", type=int, default=64, help="expert intermediate size (DeepSeek-V3: 2048)")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats (default 7; --quick 3)")
    parser.add_argument(
        "--boundary-only",
        action="store_true",
        help="only the boundary's own ops (layout index, gather, zero-filled scatter): no sglang needed",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch (steadier on a shared machine)")
    args = parser.parse_args(argv)
    if args.boundary_only and args.png:
        parser.error("--png charts the full benchmark (MoE times); --boundary-only has none")
    defaults = QUICK if args.quick else FULL
    args.rows = args.rows or defaults["rows"]
    args.repeats = args.repeats or defaults["repeats"]
    args.identity_repeats = defaults["identity_repeats"]
    return args


def write_png(results, title: str, path: Path) -> None:
    """Padded upstream against the patched layer per dummy fraction, net speedup on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['dummy_fraction']:.0%}" for r in results]
    xs = range(len(results))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar([x - 0.2 for x in xs], [r["moe_padded_s"] * 1e3 for r in results], 0.4, label="upstream, padded rows")
    ax.bar([x + 0.2 for x in xs], [r["patched_s"] * 1e3 for r in results], 0.4, label="patched (compact + restore)")
    for x, r in zip(xs, results):
        ax.annotate(f"{r['net_speedup']:.2f}x", (x + 0.2, r["patched_s"] * 1e3), ha="center", va="bottom")
    ax.set_xticks(list(xs), labels)
    ax.set_xlabel("dummy rows")
    ax.set_ylabel("MoE layer, ms (min of repeats)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sync_free_steps(layouts, x, layers: int = 2) -> None:
    """The boundary's steps on new forwards (a new layout each) under set_sync_debug_mode('error')."""
    from sglang_overlay.patches.moe_cp_compaction.rows import compact_rows, restore_rows

    torch.cuda.synchronize(x.device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for layout in layouts:
            for _layer in range(layers):
                index, _count = layout.device_tensors(x.device)
                restore_rows(compact_rows(x, index) * 2, index, layout.num_rows)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize(x.device)


def boundary_steps(x, layout, layers: int) -> torch.Tensor:
    """What forward_deepep adds around the MoE on one forward with dummy rows (MoE body: none)."""
    from sglang_overlay.patches.moe_cp_compaction.rows import compact_rows, restore_rows

    out = x
    for _layer in range(layers):
        index, _count = layout.device_tensors(x.device)
        out = restore_rows(compact_rows(x, index), index, layout.num_rows)
    return out


def valid_rows_of(rows: int, fraction: float, g: torch.Generator) -> torch.Tensor:
    n_valid = rows - round(fraction * rows)
    return torch.sort(torch.randperm(rows, generator=g)[:n_valid]).values


def run_boundary_only(args, device, dtype) -> dict:
    from sglang_overlay.patches.moe_cp_compaction.layout import ComputePaddingLayout

    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.rows, args.hidden, generator=g).to(device=device, dtype=dtype)
    results = []
    with torch.no_grad():
        for fraction in FRACTIONS[1:]:  # without dummy rows forward_deepep runs upstream unchanged
            valid = valid_rows_of(args.rows, fraction, g)
            layout = lambda: ComputePaddingLayout(args.rows, valid.clone(), "bench")  # noqa: E731 (a new forward)
            row = dict(dummy_fraction=fraction, rows=args.rows, valid_rows=int(valid.numel()))
            row.update(
                timed(
                    {
                        "forward_61_layers_s": (lambda lay: boundary_steps(x, lay, 61), layout),
                        "one_layer_s": (lambda lay: boundary_steps(x, lay, 1), layout),
                    },
                    device,
                    args.repeats,
                )
            )
            results.append(row)
        sync_check = "not run (no CUDA device)"
        if device.type == "cuda":
            sync_free_steps(
                [ComputePaddingLayout(args.rows, torch.arange(0, args.rows, 2), "bench") for _ in range(3)], x
            )
            sync_check = "passed: the boundary's steps ran under set_sync_debug_mode('error')"
    lines = [
        f"moe-cp-compaction boundary only on {device} ({args.dtype}, hidden {args.hidden}, {args.rows} rows)",
        f"{'dummy':>6} {'valid':>6} {'1 layer ms':>11} {'61 layers ms':>13}",
    ]
    lines += [
        f"{r['dummy_fraction']:>6.0%} {r['valid_rows']:>6} {r['one_layer_s'] * 1e3:>11.3f} "
        f"{r['forward_61_layers_s'] * 1e3:>13.3f}"
        for r in results
    ]
    print("\n".join(lines + [f"host-sync check: {sync_check}"]))
    return dict(mode="boundary-only", rows=results, sync_check=sync_check, passed=True)


def _layer_of_installed_pin(args, device, dtype):
    """Upstream's own ``DeepseekV2MoE`` of the installed pin with the DeepEP stand-ins, its unhooked
    ``forward_deepep`` and the pin's boundary hook: ``(moe, upstream, hook)``. The release folder serving the
    installed sglang (from the registry) names both the hook and the builder (its tests' ``standins``)."""
    import importlib

    from sglang_overlay.core import installed
    from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches
    from tests.support.moe_standins import MoeShape

    version = installed.installed_sglang_version()
    (declared,) = [p for p in discover_patches(ANY_UPSTREAM) if p.id == "moe-cp-compaction"]
    release = declared.release_for(version)
    (target,) = [t for t in release.targets if t.qualname == "DeepseekV2MoE.forward_deepep"]
    standins = importlib.import_module(f"tests.patches.moe_cp_compaction.{release.folder}.standins")
    shape = MoeShape(
        hidden=args.hidden, experts=args.experts, top_k=args.top_k, n_group=8, topk_group=4, inter=args.inter
    )
    moe, _, upstream = standins.layer_and_upstream(shape, dtype=dtype, device=device)
    return moe, upstream, target.resolve_hook()


def run_full(args, device, dtype) -> dict:
    require_sglang(
        ">=0.5.20",
        "bench_moe_compaction.py (the whole DeepseekV2MoE layer)",
        "--boundary-only measures the boundary alone, without sglang.",
    )
    from rich.console import Console
    from rich.table import Table

    from sglang_overlay.patches.moe_cp_compaction.batch_layout import attach_layout
    from sglang_overlay.patches.moe_cp_compaction.layout import ComputePaddingLayout
    from tests.support.moe_standins import make_forward_batch

    moe, upstream, hook = _layer_of_installed_pin(args, device, dtype)
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.rows, args.hidden, generator=g).to(device=device, dtype=dtype)

    def batch(rows: int, layout=None):
        fb = make_forward_batch([rows], rows, device=str(device))
        if layout is not None:
            attach_layout(fb, layout)
        return fb

    results = []
    sync_check = "not run (no CUDA device)"
    with torch.no_grad():
        for fraction in FRACTIONS:
            valid = valid_rows_of(args.rows, fraction, g)
            n_valid = int(valid.numel())

            def fresh():  # a new forward: a new layout, so its index is prepared again
                return batch(args.rows, ComputePaddingLayout(args.rows, valid.clone(), "bench"))

            compact_x = x[valid.to(device)]
            row = dict(dummy_fraction=fraction, rows=args.rows, valid_rows=n_valid)
            row.update(
                timed(
                    {
                        "moe_padded_s": (lambda fb: upstream(moe, x, fb), lambda: batch(args.rows)),
                        "moe_compact_s": (lambda fb: upstream(moe, compact_x, fb), lambda: batch(n_valid)),
                        "compaction_s": (lambda fb: hook(nothing, moe, x, fb), fresh),
                        "patched_s": (lambda fb: hook(upstream, moe, x, fb), fresh),
                    },
                    device,
                    args.repeats,
                )
            )
            row["net_speedup"] = row["moe_padded_s"] / row["patched_s"]
            row["compaction_fraction"] = row["compaction_s"] / row["patched_s"]
            results.append(row)
        ident = batch(args.rows, ComputePaddingLayout.identity(args.rows))
        ident_s = timed(
            {
                "hook": (lambda fb: hook(nothing, moe, x, fb), lambda: ident),
                "body": (lambda fb: nothing(moe, x, fb), lambda: ident),
            },
            device,
            args.identity_repeats,
        )
        identity_overhead_s = max(ident_s["hook"] - ident_s["body"], 0.0)
        if device.type == "cuda":
            half = torch.arange(0, args.rows, 2)
            forwards = [batch(args.rows, ComputePaddingLayout(args.rows, half, "bench")) for _ in range(3)]
            torch.cuda.synchronize(device)
            torch.cuda.set_sync_debug_mode("error")
            try:
                for fb in forwards:  # each a new forward: index preparation included
                    for _layer in range(2):
                        hook(sync_free_body, moe, x, fb)
            finally:
                torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize(device)
            sync_check = "passed: the boundary ran under set_sync_debug_mode('error')"

    title = (
        f"moe-cp-compaction on {device} ({args.dtype}, hidden {args.hidden}, top-{args.top_k} of "
        f"{args.experts} experts, inter {args.inter}, {args.rows} rows)"
    )
    table = Table(title=title)
    for col in (
        "dummy",
        "valid rows",
        "compaction ms",
        "MoE padded ms",
        "MoE compact ms",
        "patched ms",
        "net speedup",
        "compaction / layer",
    ):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            f"{r['dummy_fraction']:.0%}",
            str(r["valid_rows"]),
            f"{r['compaction_s'] * 1e3:.3f}",
            f"{r['moe_padded_s'] * 1e3:.2f}",
            f"{r['moe_compact_s'] * 1e3:.2f}",
            f"{r['patched_s'] * 1e3:.2f}",
            f"{r['net_speedup']:.2f}x",
            f"{r['compaction_fraction']:.2%}",
        )
    console = Console()
    console.print(table)
    goals = {
        "identity_overhead_us": identity_overhead_s * 1e6,
        "identity_overhead_vs_layer": identity_overhead_s / results[0]["moe_padded_s"],
        "compact_faster_at_25_and_50": all(r["net_speedup"] > 1 for r in results if r["dummy_fraction"] >= 0.25),
    }
    console.print(
        f"identity fast path adds {goals['identity_overhead_us']:.1f} us per MoE layer "
        f"({goals['identity_overhead_vs_layer']:.4%} of the layer); compact path faster at >= 25% dummy: "
        f"{goals['compact_faster_at_25_and_50']}; host-sync check: {sync_check}"
    )
    if args.png:
        write_png(results, title, args.png)
        print(f"wrote {args.png}")
    return dict(
        mode="full",
        shape=dict(rows=args.rows, hidden=args.hidden, experts=args.experts, top_k=args.top_k, inter=args.inter),
        rows=results,
        identity_overhead_s=identity_overhead_s,
        goals=goals,
        sync_check=sync_check,
        passed=goals["compact_faster_at_25_and_50"],
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available here")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    torch.set_num_threads(args.threads)
    result = (run_boundary_only if args.boundary_only else run_full)(args, device, dtype)
    out = dict(
        device=str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
        dtype=args.dtype,
        shape=dict(rows=args.rows, hidden=args.hidden),
        quick=args.quick,
        timing=f"min of {args.repeats} interleaved repeats after 2 warm-ups, {args.threads} CPU thread(s)",
    )
    out.update(result)  # the full benchmark's shape names the experts too
    if write_json(args.json, out):
        print(f"wrote {args.json}")
    return 0 if out["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
