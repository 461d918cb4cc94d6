"""A launched real server as processes: ``RealServer`` (URL, root process, log) and stopping a launch whole.

Invariants: the server runs in a new session (its own process group); ``stop()`` sends SIGTERM to the group,
then SIGKILL, then kills by pid any descendant that left the group, and reports survivors (``orphans``): after
``stop()`` no process of this launch is alive. Leftovers that left the group are found by environment
(``LAUNCH_ID_ENV``); SGLang's ``setproctitle`` hides the environment of renamed processes such as
``sglang::scheduler``: those are covered by the group kill and by the pid snapshot ``stop()`` takes first.
Cost: ``stop()`` waits up to ``grace_s`` for SIGTERM, then up to 10 s for leftovers (a process scan per 0.2 s).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.real_server.launch_config import LAUNCH_ID_ENV, ServerConfig


@dataclass
class RealServer:
    """A launched server: its URL, root process, log and the seconds it took to be ready."""

    config: ServerConfig
    port: int
    process: subprocess.Popen
    log_path: Path
    launch_id: str
    time_to_ready: float = 0.0
    orphans: list = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def processes(self) -> list:
        """The root process and every live descendant (psutil.Process objects)."""
        import psutil

        try:
            root = psutil.Process(self.pid)
            return [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def tokenizer_workers(self) -> list:
        """The live processes titled ``sglang::tokenizer_worker:<pid>`` (set in ``TokenizerWorker.__init__``)."""
        found = []
        for proc in self.processes():
            try:
                if "tokenizer_worker" in " ".join(proc.cmdline()):
                    found.append(proc)
            except Exception:  # psutil.Error: the process went between listing and reading
                continue
        return found

    def stop(self, grace_s: float = 20.0) -> list[int]:
        """Stop the whole launch; returns (and records) pids that had to be killed outside the group."""
        known = {p.pid for p in self.processes()}
        if self.process.poll() is None:
            _signal_group(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.wait(timeout=10)
        self.orphans = _kill_leftovers(self.launch_id, known)
        return self.orphans


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def launch_processes(launch_id: str) -> list:
    """Live processes whose environment carries this launch id (wherever they ended up)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(LAUNCH_ID_ENV) == launch_id:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _alive(pid: int):
    import psutil

    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc
    except psutil.Error:
        return None


def _kill_leftovers(launch_id: str, known: set[int]) -> list[int]:
    """Wait up to 10 s for the launch's processes to go, then kill the survivors by pid; returns their pids."""
    import psutil

    deadline = time.monotonic() + 10
    while True:
        pids = {p.pid for p in launch_processes(launch_id)} | set(known)
        alive = [proc for proc in map(_alive, sorted(pids)) if proc is not None]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return sorted(p.pid for p in alive)
