#!/usr/bin/env python3
"""What compacting CP dummy rows at the MoE boundary costs, against the MoE work it saves.

Patch ``moe-cp-compaction``. For dummy fractions 0%, 12%, 25% and 50% of a
rank's rows (interleaved through the batch, as lane-slot compute padding puts
them), on upstream's own ``DeepseekV2MoE`` of the installed pin (real gate, grouped
top-k, shared experts; the release folder's own hook) with the CPU
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
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_common import add_output_flags, write_json  # noqa: E402
from moe_compaction.boundary import run_boundary_only  # noqa: E402
from moe_compaction.full import run_full  # noqa: E402

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
