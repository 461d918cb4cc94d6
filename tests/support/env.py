"""What tests, fresh interpreters and real servers share: the repository, the overlay under test, the GSM8K data.

``REPO`` is the checkout; ``subprocess_env()`` is the environment of a fresh interpreter that runs the overlay
under test (the checkout's sources, or with ``SGLANG_OVERLAY_TEST_INSTALLED=1`` the wheel installed in the
environment); ``GSM8K_DIR`` the small committed fixture and ``full_gsm8k_dir()`` the full splits where a copy
exists. Imported by test modules, ``tests/support`` and ``scripts/`` alike (pytest hooks and fixtures stay in
the conftest files).

Invariant: nothing here imports sglang or the overlay. Cost: a few path lookups.
"""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
GSM8K_DIR = REPO / "tests" / "data" / "gsm8k"
_FULL_GSM8K_CANDIDATES = (SHARED / "data" / "gsm8k", Path.home() / ".cache" / "sglang-overlay" / "gsm8k")


def full_gsm8k_dir() -> Path | None:
    """The full GSM8K splits (1,319 test / 7,473 train), or None where no copy exists here."""
    for candidate in _FULL_GSM8K_CANDIDATES:
        if (candidate / "test.jsonl").is_file() and (candidate / "train.jsonl").is_file():
            return candidate
    return None


requires_full_gsm8k = pytest.mark.skipif(
    full_gsm8k_dir() is None,
    reason="needs the full GSM8K splits: ../shared/data/gsm8k beside the checkout, or the runner's cache "
    "(~/.cache/sglang-overlay/gsm8k, filled by `sglang-overlay gsm8k` when online)",
)

# SGLANG_OVERLAY_TEST_INSTALLED=1: fresh interpreters and real servers run the overlay installed in this
# environment (a wheel, as users install it) instead of this checkout's sources; CI sets it where it
# installs the built wheel into an environment the project's script did not build.
INSTALLED_ENV = "SGLANG_OVERLAY_TEST_INSTALLED"


def overlay_under_test() -> str:
    """ "installed" or "checkout": which copy of the overlay fresh interpreters and servers import."""
    return "installed" if os.environ.get(INSTALLED_ENV, "").strip() in ("1", "true", "yes") else "checkout"


def overlay_path() -> list[str]:
    """What goes first on PYTHONPATH for the overlay under test (nothing for the installed one)."""
    return [str(REPO)] if overlay_under_test() == "checkout" else []


def overlay_cwd() -> Path:
    """Where fresh interpreters start: the checkout, unless the installed overlay is under test (``python -m``
    and ``-c`` put their working directory first on sys.path, where the checkout would shadow it)."""
    return REPO if overlay_under_test() == "checkout" else Path.home()


def subprocess_env(**extra: str) -> dict:
    """Environment for a fresh interpreter running the overlay under test (this checkout, by default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_")}
    env.pop("SGLANG_PLUGINS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*overlay_path(), env.get("PYTHONPATH", "")]))
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env
