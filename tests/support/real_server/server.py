"""Launch a real SGLang server (the installed pin) on the CPU (127.0.0.1, a free port), wait until it serves, stop it whole.

Usage (a context manager; ``tests/e2e/conftest.py`` wraps it in fixtures, ``scripts/demo.py`` reuses it)::

    from tests.support.real_server.server import ServerConfig, running_server
    with running_server(ServerConfig(overlay=True, launcher="overlay"), log_dir=tmp) as srv:
        httpx.get(f"{srv.url}/v1/models")

What a launch is (command, environment, CPU flags, stand-ins) is ``launch_config.py``'s ``ServerConfig``, with
the tiny offline model (``model.py``); ``CPU_FLAGS``' ``--disable-overlap-schedule`` matters: 20x the decode rate
on 2 cores; ``--sleep-on-idle`` too: an idle scheduler otherwise spins a core, measured 99.4% against 1.0% with
it, so the pool's other live servers starved the one under test on 2 cores and timing probes missed their
window. The readiness wait is ``readiness.py``; the launch's processes and stopping them whole ``process.py``
(the names are re-exported here).

Invariants: the server runs in a new session (its own process group); after ``stop()`` no process of this
launch is alive (``process.py``). Start-up failures raise ``ServerStartError`` with the log tail as soon as the
process dies (never a silent wait to the timeout); an HTTP port another process took before uvicorn bound it
(``PortTaken``) is retried on a new port, ``PORT_ATTEMPTS`` launches in all; a failed launch is stopped whole.
Cost: a launch is 20-40 s to ready on 2 warm cores (90-120 s cold); polling is one HTTP request per 0.5 s.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from tests.support.env import overlay_cwd, subprocess_env
from tests.support.real_server.launch_config import (
    ABORT_FLAGS,
    CPU_FLAGS,
    HICACHE_FLAGS,
    LAUNCH_ID_ENV,
    OVERLAY_PLUGIN,
    RUNNING_TIMEOUT_S,
    STANDIN_PLUGIN,
    STANDINS,
    VENV_BIN,
    ServerConfig,
)
from tests.support.real_server.model import build_tiny_model
from tests.support.real_server.process import RealServer, launch_processes
from tests.support.real_server.readiness import (
    MAX_WORKER_DEATHS,
    WORKER_DIED,
    PortTaken,
    ServerStartError,
    wait_ready,
)

__all__ = [
    "ABORT_FLAGS", "CPU_FLAGS", "HICACHE_FLAGS", "LAUNCH_ID_ENV", "MAX_WORKER_DEATHS", "OVERLAY_PLUGIN",
    "PORT_ATTEMPTS", "RUNNING_TIMEOUT_S", "STANDINS", "STANDIN_PLUGIN", "VENV_BIN", "WORKER_DIED", "PortTaken",
    "RealServer", "ServerConfig", "ServerStartError", "free_port", "free_port_block", "launch_processes",
    "run_status", "running_server", "start_server", "wait_ready",
]  # fmt: skip

PORT_ATTEMPTS = 3


def run_status(url: str, *extra: str, **env: str) -> subprocess.CompletedProcess:
    """``sglang-overlay status --url URL`` as an operator runs it (this environment's console script, reading
    with the overlay under test: the checkout's, unless the installed one is under test); ``env`` added."""
    return subprocess.run([str(VENV_BIN / "sglang-overlay"), "status", "--url", url, *extra], capture_output=True,
                          text=True, timeout=120, env=subprocess_env(**env))  # fmt: skip


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_block(count: int) -> int:
    """A port ``p`` with ``p .. p + count - 1`` all free now: SGLang derives its ZMQ ports from some ports
    (DP attention: ``--dist-init-addr``'s port + 1 .. + 6) and waits 30 s, then fails, on a taken one."""
    for _ in range(200):
        base = free_port()
        if base + count > 65535:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)).bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise RuntimeError(f"no block of {count} free ports found on 127.0.0.1")


def start_server(
    config: ServerConfig,
    log_dir: str | os.PathLike,
    model_dir: Path | None = None,
    timeout_s: float = 300.0,
    poll_s: float = 0.5,
) -> RealServer:
    """Launch and wait until ready; on failure the launch is stopped whole and ServerStartError raised.

    ``poll_s`` is the readiness poll interval, so also the resolution of ``time_to_ready``."""
    model_dir = Path(model_dir) if model_dir else build_tiny_model()
    for _ in range(PORT_ATTEMPTS - 1):
        try:
            return _start_once(config, Path(log_dir), model_dir, timeout_s, poll_s)
        except PortTaken:
            continue  # the launch was stopped whole; a new port
    return _start_once(config, Path(log_dir), model_dir, timeout_s, poll_s)


def _start_once(config: ServerConfig, log_dir: Path, model_dir: Path, timeout_s: float, poll_s: float) -> RealServer:
    port = free_port()
    launch_id = uuid.uuid4().hex
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{config.name}-{port}.log"
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(config.command(model_dir, port)) + "\n").encode())
        log.flush()
        started = time.monotonic()
        proc = subprocess.Popen(
            config.command(model_dir, port),
            cwd=overlay_cwd(),
            env=config.environment(launch_id),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = RealServer(config, port, proc, log_path, launch_id)
    try:
        wait_ready(server, timeout_s, poll_s)
    except BaseException:
        server.stop(grace_s=5)
        raise
    server.time_to_ready = time.monotonic() - started
    return server


@contextmanager
def running_server(
    config: ServerConfig,
    log_dir: str | os.PathLike,
    model_dir: Path | None = None,
    timeout_s: float = 300.0,
    poll_s: float = 0.5,
):
    server = start_server(config, log_dir, model_dir, timeout_s, poll_s)
    try:
        yield server
    finally:
        server.stop()
