"""`scripts/demo.py`: the README's one command for a CPU-only try-out. It starts a patched server on
the tiny offline model, prints the URL and the per-process status, serves, and stops cleanly on Ctrl-C,
even on a second Ctrl-C during the stop (no process of the launch left)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import psutil
import pytest

from tests.support.env import REPO, subprocess_env
from tests.support.proc import with_default_sigint

# slow: a convenience script over the launch code every e2e module runs; its own part is the Ctrl-C stop (4 min)
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


class _Lines:
    """The demo's output lines, read by a thread: a blocking ``readline`` could never time out while the
    demo waits, silently, for Ctrl-C."""

    def __init__(self, stream):
        self.queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in iter(stream.readline, ""):
            self.queue.put(line)
        self.queue.put(None)  # end of output


def _read_until(lines: _Lines, pattern: str, timeout_s: float, seen: list[str]) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.queue.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no {pattern!r} within {timeout_s:.0f} s:\n{''.join(seen)[-4000:]}")


def test_demo_serves_with_the_overlay_everywhere_and_stops_on_ctrl_c(tiny_model, tmp_path):
    env = subprocess_env(COLUMNS="200")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--tokenizer-worker-num", "2", "--log-dir", str(tmp_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=with_default_sigint,
    )
    seen: list[str] = []
    lines = _Lines(proc.stdout)
    try:
        url = _read_until(lines, r"serving at (http://127\.0\.0\.1:\d+)", 400, seen).group(1)
        _read_until(lines, r"^OK: every process that runs patched code has the overlay", 60, seen)
        _read_until(lines, r"try: curl", 30, seen)
        _read_until(lines, r"Ctrl-C stops the server", 30, seen)
        table = "".join(seen)
        assert "tokenizer_worker" in table and "scheduler" in table, table[-3000:]
        model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
        assert f'"model": "{model}"' in "".join(seen)  # the printed curl line works as printed
        reply = httpx.post(
            f"{url}/v1/completions", json={"model": model, "prompt": "Question: 2+2?", "max_tokens": 4}, timeout=120
        )
        assert reply.status_code == 200 and reply.json()["choices"][0]["text"] is not None
        launched = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert len(launched) >= 4  # launcher, server, scheduler, detokenizer, workers
        os.kill(proc.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground command
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGINT)  # an impatient second Ctrl-C must not cut the stop short
        assert proc.wait(timeout=120) == 0, "".join(seen)[-3000:]
        rest = "".join(iter(lambda: lines.queue.get(timeout=10), None))
        assert "server stopped" in rest and "killed leftovers" not in rest, rest
        time.sleep(1)
        alive = [
            pid for pid in launched if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        ]
        assert alive == [], alive
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{url}/health", timeout=5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
