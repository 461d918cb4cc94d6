"""Real-server tier (marker ``e2e``): real SGLang 0.5.20 servers on the CPU with a tiny offline model.

Servers are expensive (20-40 s to ready on 2 idle cores, minutes under load), so they are shared: one
session-wide ``ServerPool`` keyed by ``ServerConfig`` keeps at most ``MAX_ALIVE`` servers running (least
recently used stopped first) and stops every one at the end of the session, checking that no process of
any launch is left (``orphans``). Modules ask for configurations in an order that reuses what is running.
Each module marks itself ``pytestmark = pytest.mark.e2e``.
Logs: ``$SGLANG_OVERLAY_E2E_LOGS`` if set, else pytest's temporary directory (``e2e-logs``).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import pytest

from tests.support.real_server.model import build_tiny_model
from tests.support.real_server.server import RealServer, ServerConfig, ServerStartError, start_server

MAX_ALIVE = 3

# The configurations the tier launches (each at most once per session when modules run in file order).
OVERLAY_PICKLE_CLI = ServerConfig(overlay=True, launcher="overlay", ipc="pickle", abort_triggers=True)
OVERLAY_MSGPACK = ServerConfig(overlay=True, launcher="sglang", ipc="msgpack", abort_triggers=True)
# --enable-metrics: /metrics carries sglang_overlay_info (test_02 on both pins; upstream's absence in test_03)
_METRICS = ("--enable-metrics",)
OVERLAY_PICKLE_W2 = ServerConfig(
    overlay=True, ipc="pickle", tokenizer_workers=2, abort_triggers=True, extra_args=_METRICS
)
OVERLAY_MSGPACK_W2 = ServerConfig(
    overlay=True, ipc="msgpack", tokenizer_workers=2, abort_triggers=True, extra_args=_METRICS
)
OVERLAY_API_KEY = ServerConfig(overlay=True, api_key="overlay-e2e-key")  # upstream's --api-key middleware
UPSTREAM_PICKLE = ServerConfig(overlay=False, ipc="pickle", abort_triggers=True)
UPSTREAM_MSGPACK = ServerConfig(overlay=False, ipc="msgpack", abort_triggers=True, extra_args=_METRICS)
OVERLAY_PLAIN = ServerConfig(overlay=True)  # no abort triggers: long runs (GSM8K) must not meet the running timeout
UPSTREAM_PLAIN = ServerConfig(overlay=False)  # the fuzz's reference: no queue limit, so its 5xx do not depend on timing
# A device pool of 1,024 tokens: the HiCache tests' prefixes (8 x ~250 tokens) spill to the host tier.
# write_through: every inserted prefix is backed up at once (the default policy waits for repeated hits).
_HICACHE_ARGS = ("--max-total-tokens", "1024", "--hicache-write-policy", "write_through")
OVERLAY_HICACHE = ServerConfig(overlay=True, hicache=True, extra_args=_HICACHE_ARGS)
UPSTREAM_HICACHE = ServerConfig(overlay=False, hicache=True, extra_args=_HICACHE_ARGS)


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


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return build_tiny_model()


@pytest.fixture(scope="session")
def e2e_log_dir(tmp_path_factory) -> Path:
    override = os.environ.get("SGLANG_OVERLAY_E2E_LOGS")
    if override:
        Path(override).mkdir(parents=True, exist_ok=True)
        return Path(override)
    return tmp_path_factory.mktemp("e2e-logs")


@pytest.fixture(scope="session")
def server_pool(e2e_log_dir, tiny_model):
    pool = ServerPool(e2e_log_dir, tiny_model)
    yield pool
    pool.close()
    print(f"\n[e2e] launches (config, seconds to ready): {pool.launches}; logs in {e2e_log_dir}")
    assert not pool.orphans, f"processes survived their server's stop and had to be killed by pid: {pool.orphans}"
