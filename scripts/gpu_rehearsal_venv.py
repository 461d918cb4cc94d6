#!/usr/bin/env python3
"""A clean Python 3.12 environment shaped like the GPU check's device: torch, the image's packages the carry
relies on, nothing else (no sglang, no overlay), for CI's CPU rehearsal of ``scripts/gpu_check.sh``.

The distributions are linked, not installed, from existing Python 3.12 site folders (CI: the ``wheel``
session's environment, which has torch and sglang's dependencies; a CUDA torch there is several GB, so a
second install would cost minutes): torch and the distributions ``.gpu_carry/manifest.json`` lists as used
from the device's image (``device_image_used``), each with what it requires (markers evaluated, extras
left out) less what the carry itself brings. A distribution missing from every source folder is an error, named.
Invariant: the new environment's site folder holds only those distributions' files (links) and pip's own.
Cost: one ``python -m venv`` (with pip, a few seconds) and a few hundred links.

    python3.12 scripts/gpu_rehearsal_venv.py --venv /tmp/gpu312 --manifest .gpu_carry/manifest.json SITE [SITE...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(found: dict, roots, carried=frozenset()) -> list:
    """The distributions ``roots`` need, their requirements followed (extras left out), less those the carry brings."""
    from packaging.requirements import Requirement

    seen, stack = {}, [norm(r) for r in roots]
    while stack:
        name = stack.pop()
        if name in seen or name in carried:
            continue
        if name not in found:
            raise SystemExit(f"gpu_rehearsal_venv: {name} is in none of the source site folders")
        seen[name] = found[name]
        for line in found[name].requires or ():
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(norm(req.name))
    return list(seen.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, required=True)
    ap.add_argument("--manifest", type=Path, required=True)
    ap.add_argument("sites", nargs="+", type=Path, help="Python 3.12 site folders to link from")
    args = ap.parse_args(argv)
    sys.path[1:1] = [str(site) for site in args.sites]  # packaging, from a source when this interpreter lacks it
    found = {}
    for site in args.sites:
        for dist in distributions(path=[str(site)]):
            found.setdefault(norm(dist.metadata["Name"]), dist)
    manifest = json.loads(args.manifest.read_text(encoding="utf-8"))
    carried = {norm(d) for d in manifest["pure"]} | {norm(p.split("==")[0]) for p in manifest["compiled"]}
    dists = closure(found, ["torch", *manifest["device_image_used"]], carried)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(args.venv)], check=True)
    (site,) = args.venv.glob("lib/python3*/site-packages")
    links = 0
    for dist in dists:
        root = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in sorted(tops):
            if top != "__pycache__" and (root / top).exists() and not (site / top).exists():
                os.symlink(root / top, site / top)
                links += 1
    names = sorted(norm(d.metadata["Name"]) for d in dists)
    print(f"{args.venv}: {len(names)} distributions linked ({links} entries): {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
