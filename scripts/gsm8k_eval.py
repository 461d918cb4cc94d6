#!/usr/bin/env python3
"""GSM8K accuracy runner; the same as ``sglang-overlay gsm8k`` (see sglang_overlay_gsm8k/cli.py).

Works from a checkout without installing it (the repository root goes first on sys.path); needs the
``gsm8k`` extra (httpx, tqdm, matplotlib) and says what to install, exit 2, when it is missing.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_overlay_gsm8k.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
