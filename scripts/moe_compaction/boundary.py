"""The moe-cp-compaction boundary's own steps, timed without the MoE: what ``forward_deepep`` adds around it.

Job: per dummy fraction, a new layout's device index and per layer one gather and one zero-filled scatter
(``rows.compact_rows`` / ``restore_rows``), on the CPU or CUDA; on CUDA the same steps under
``set_sync_debug_mode("error")``. Invariant: needs torch and the overlay, never sglang (the GPU check's first
step runs it on a host without sglang). Cost: milliseconds per fraction at the default sizes.
Also the timing helpers the whole-layer measurement (``full``) shares.
"""

from __future__ import annotations

import time

import torch

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


def valid_rows_of(rows: int, fraction: float, g: torch.Generator) -> torch.Tensor:
    n_valid = rows - round(fraction * rows)
    return torch.sort(torch.randperm(rows, generator=g)[:n_valid]).values


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
