"""``python -m sglang_overlay`` is the ``sglang-overlay`` command."""

import sys

from sglang_overlay.cli import main

sys.exit(main())
