"""Real servers shared across tests: a pool keyed by ``ServerConfig`` that keeps at most ``MAX_ALIVE`` running
(least recently used stopped first), remembers a failed launch (every later test of that configuration fails at
once, with its log) and, on ``close()``, stops every server, keeping the pids any launch left behind
(``orphans``). The real-server tier's session pool (``tests/e2e/conftest.py``) and the real model's own
(``test_10``) are two of these.

Invariant: at most ``MAX_ALIVE`` servers of a pool run at once. Cost: server launches (tens of seconds each).
"""

from collections import OrderedDict
from pathlib import Path

from tests.support.real_server.server import RealServer, ServerConfig, ServerStartError, start_server

MAX_ALIVE = 3


class ServerPool:
    def __init__(self, log_dir: Path, model_dir: Path):
        self.log_dir, self.model_dir = log_dir, model_dir
        self.alive: OrderedDict[ServerConfig, RealServer] = OrderedDict()
        self.launches: list[tuple[str, float]] = []
        self.orphans: dict[str, list[int]] = {}
        self.failed: dict[ServerConfig, ServerStartError] = {}

    def get(self, config: ServerConfig) -> RealServer:
        if config in self.failed:  # a launch that failed once fails every later test at once, with its log
            raise ServerStartError(f"(launch failed earlier in this session) {self.failed[config]}")
        server = self.alive.get(config)
        if server is not None and server.process.poll() is None:
            self.alive.move_to_end(config)
            return server
        if server is not None:  # died: report its log with the next failure
            self.alive.pop(config)
        while len(self.alive) >= MAX_ALIVE:
            _, oldest = self.alive.popitem(last=False)
            self._stop(oldest)
        try:
            server = start_server(config, self.log_dir, self.model_dir)
        except ServerStartError as exc:
            self.failed[config] = exc
            raise
        self.launches.append((config.name, round(server.time_to_ready, 1)))
        self.alive[config] = server
        return server

    def _stop(self, server: RealServer) -> None:
        orphans = server.stop()
        if orphans:
            self.orphans[server.config.name] = orphans

    def close(self) -> None:
        while self.alive:
            _, server = self.alive.popitem(last=False)
            self._stop(server)
