"""The installed pin's whole ``DeepseekV2MoE`` fed padded rows, against its moe-cp-compaction hook.

Job: per dummy fraction, upstream's ``forward_deepep`` on every row and on the valid rows alone, the hook around
a body that does nothing (the compaction's own cost) and around upstream's (the patched layer end to end); the
identity fast path's cost; on CUDA the hook under ``set_sync_debug_mode("error")``; a table and an optional PNG.
Invariant: the layer, its DeepEP stand-ins and the hook all come from the release folder serving the installed
sglang (through the registry), so each pin measures its own hook. Cost: seconds at ``--quick`` sizes on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import torch
from bench_common import require_sglang

from moe_compaction.boundary import FRACTIONS, timed, valid_rows_of


def nothing(self, hidden_states, forward_batch, input_ids_global=None):
    """A MoE body that costs nothing: what is left is the boundary's own work."""
    return hidden_states


def sync_free_body(self, hidden_states, forward_batch, input_ids_global=None):
    return hidden_states * 2


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
        ">=0.5.23",
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
