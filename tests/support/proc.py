"""Run fresh interpreters (the way SGLang's processes start) from the test suite."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.env import REPO, overlay_cwd, subprocess_env

VENV_BIN = Path(sys.executable).parent


def run_python(code: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the overlay's environment plus ``env``."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=overlay_cwd(),
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


# load_plugins(), then every target of the installed pin's lock resolved: is it wrapped, and what the
# overlay's hooking status says; one "REPORT<json>" line (read it with hook_report)
HOOK_REPORT = """
import importlib, json
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang_overlay.core import lockfile
from sglang_overlay.core.hooking import status
lock = lockfile.read_lock()
wrapped = {}
for path, entry in lock["targets"].items():
    owner = importlib.import_module(entry["module"])
    for part in entry["qualname"].split("."):
        owner = getattr(owner, part)
    wrapped[path] = hasattr(owner, "__wrapped__")
print("REPORT" + json.dumps({"lock": str(lockfile.lock_path()), "pin": lock["upstream"]["version"],
                             "wrapped": wrapped, "status": status()}))
"""


def hook_report(proc: subprocess.CompletedProcess) -> dict:
    """The JSON of HOOK_REPORT's last REPORT line (the process must have succeeded)."""
    import json

    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("REPORT")][-1]
    return json.loads(line[len("REPORT") :])


def with_default_sigint() -> None:
    """``preexec_fn`` for a child a test stops with SIGINT, as Ctrl-C would: a shell that starts jobs in
    the background hands them SIGINT ignored, and Python keeps an ignored SIGINT ignored, so the child
    would never see the signal; a terminal's foreground job has the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
