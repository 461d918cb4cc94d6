#!/usr/bin/env python3
"""GSM8K accuracy runner; the same as ``sglang-overlay gsm8k`` (see sglang_overlay/gsm8k_eval.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_overlay_gsm8k.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
