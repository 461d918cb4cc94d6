"""Real-server tier (marker ``e2e``): real SGLang servers of the installed pin on the CPU with a tiny offline model.

Servers are expensive (20-40 s to ready on 2 idle cores, minutes under load), so they are shared: one
session-wide ``ServerPool`` keyed by ``ServerConfig`` keeps at most ``MAX_ALIVE`` servers running (least
recently used stopped first) and stops every one at the end of the session, checking that no process of
any launch is left (``orphans``). Modules ask for configurations in an order that reuses what is running.
Each module marks itself ``pytestmark = pytest.mark.e2e``.
Logs: ``$SGLANG_OVERLAY_E2E_LOGS`` if set, else pytest's temporary directory (``e2e-logs``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.real_server.model import build_tiny_model
from tests.support.real_server.pool import ServerPool


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
