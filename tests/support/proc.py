"""Run fresh interpreters (the way SGLang's processes start) from the test suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO, subprocess_env

VENV_BIN = Path(sys.executable).parent


def run_python(code: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the overlay's environment plus ``env``."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_cli(*args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """Run the installed ``sglang-overlay`` console script as a user would."""
    exe = VENV_BIN / "sglang-overlay"
    return subprocess.run(
        [str(exe), *args], cwd=REPO, env=subprocess_env(**env), capture_output=True, text=True, timeout=timeout
    )
