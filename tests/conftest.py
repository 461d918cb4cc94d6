"""Shared pytest set-up: offline, quiet, repository root importable (tests.support)."""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
GSM8K_DIR = SHARED / "data" / "gsm8k"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def subprocess_env(**extra: str) -> dict:
    """Environment for a fresh interpreter running the overlay from this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_")}
    env.pop("SGLANG_PLUGINS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env
