"""The command line both owner-lane benchmarks share: sizes, calls per tree, seed, device, and the output flags.

    args = parse_args(__doc__, argv, quick="1k and 10k leaves, 8 load-backs per tree", per_tree="--loads")

Invariant: the same flags and defaults on every pin (``--quick``: 1k and 10k leaves, 8 calls per tree; default
1k, 10k and 100k, 16 calls). Cost: argparse; ``check_device`` imports torch only for ``--device cuda``.
"""

from __future__ import annotations

import argparse

from bench_common import add_output_flags

QUICK_SIZES, SIZES = (1_000, 10_000), (1_000, 10_000, 100_000)
QUICK_PER_TREE, PER_TREE = 8, 16


def sizes_arg(text: str) -> list:
    return [int(x) for x in text.split(",")]


def parse_args(doc: str, argv=None, quick: str = "", per_tree: str = "--loads", png: str | None = "the chart"):
    """``--quick``/``--json``/``--png``, ``--sizes``, ``per_tree`` (``--loads`` or ``--calls``, read back as
    ``args.per_tree``), ``--seed`` and ``--device``; the defaults filled in."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_output_flags(ap, quick=quick, png=png)
    ap.add_argument("--sizes", type=sizes_arg, metavar="N,N,...",
                    help="evictable leaves per tree (default 1000,10000,100000; --quick 1000,10000)")  # fmt: skip
    ap.add_argument(per_tree, type=int, dest="per_tree", help="calls per tree (default 16; --quick 8)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the KV pool and indices live")
    args = ap.parse_args(argv)
    args.sizes = args.sizes or list(QUICK_SIZES if args.quick else SIZES)
    args.per_tree = args.per_tree or (QUICK_PER_TREE if args.quick else PER_TREE)
    return args


def check_device(device: str) -> None:
    """Refuse ``--device cuda`` where torch sees no CUDA device, before anything runs.

    Raises:
        SystemExit: one line naming torch's build, no traceback.
    """
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(
            f"--device cuda needs a visible CUDA device (torch {torch.__version__}, CUDA build: "
            f"{torch.version.cuda or 'none'}); run it on a GPU host or use --device cpu"
        )


def top_level(version, release, adapter, args) -> dict:
    """The top-level figures every owner-lane benchmark's JSON shares (``schema._TOP`` less benchmark/timed_call
    /workload, which the benchmark names)."""
    return dict(sglang=version, release=release.folder, device=args.device, quick=args.quick, seed=args.seed,
                shard_size=adapter.N, page_size=adapter.PS)  # fmt: skip
