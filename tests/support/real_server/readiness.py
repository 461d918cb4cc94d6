"""Waiting until a launched real server serves, and the start-up failures (``ServerStartError``, ``PortTaken``).

Ready means ``/health`` and ``/v1/models`` answer and, with ``--tokenizer-worker-num N``, all N tokenizer
workers are up. Invariant: the wait fails at once (never a silent wait to the timeout) when the root process
exits, when uvicorn could not bind the port (``PortTaken``, which the caller retries on a new port) or when
tokenizer workers keep dying; every failure message ends with the log tail. Cost: one HTTP request (two when
healthy) and a log read per poll (0.5 s by default).
"""

from __future__ import annotations

import time

import httpx

from tests.support.real_server.process import RealServer

WORKER_DIED = "Child process ["  # uvicorn's supervisor: "Child process [PID] died" (it then respawns)
MAX_WORKER_DEATHS = 3


class ServerStartError(RuntimeError):
    """The server died or never became ready; the message ends with its log tail."""


class PortTaken(ServerStartError):
    """Another process bound the HTTP port between ``free_port()`` and uvicorn's bind (SGLang picks its
    internal ports at random too); uvicorn then waits for shutdown instead of exiting. Retried on a new port."""


def wait_ready(server: RealServer, timeout_s: float, poll_s: float = 0.5) -> None:
    """Poll until ready; fail at once when the root process exits or tokenizer workers keep dying.

    Ready means ``/health`` and ``/v1/models`` answer and, with ``--tokenizer-worker-num N``, all N workers
    have entered ``TokenizerWorker.__init__``: one worker answers HTTP while uvicorn may still be spawning
    the next on loaded cores (CI saw a w2 server "ready" with one worker)."""
    start = time.monotonic()
    headers = {"Authorization": f"Bearer {server.config.api_key}"} if server.config.api_key else {}
    with httpx.Client(timeout=5.0, headers=headers) as client:
        while True:
            code = server.process.poll()
            if code is not None:
                raise ServerStartError(
                    f"server {server.config.name} exited with {code} before it was ready; "
                    f"log {server.log_path}:\n{server.log_tail()}"
                )
            log = server.log_text()
            if f"('127.0.0.1', {server.port}): address already in use" in log:
                raise PortTaken(
                    f"server {server.config.name}: port {server.port} was taken before uvicorn bound it; "
                    f"log {server.log_path}"
                )
            deaths = sum(1 for line in log.splitlines() if WORKER_DIED in line and "died" in line)
            if deaths >= MAX_WORKER_DEATHS:
                raise ServerStartError(
                    f"server {server.config.name}: {deaths} tokenizer workers died before it was "
                    f"ready (uvicorn respawns them forever); log {server.log_path}:\n{server.log_tail()}"
                )
            try:
                if (
                    client.get(f"{server.url}/health").status_code == 200
                    and client.get(f"{server.url}/v1/models").status_code == 200
                    and (
                        server.config.tokenizer_workers == 1
                        or len(server.tokenizer_workers()) >= server.config.tokenizer_workers
                    )
                ):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() - start > timeout_s:
                raise ServerStartError(
                    f"server {server.config.name} not ready after {timeout_s:.0f} s; "
                    f"log {server.log_path}:\n{server.log_tail()}"
                )
            time.sleep(poll_s)
