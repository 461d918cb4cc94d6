"""cluster-consistency's tests: every exchange keeps a peers record (``observe.records``), here in the test's own
folder, and registers its removal at exit with a stand-in ``atexit`` that only collects the calls."""

from __future__ import annotations

import pytest

from sglang_overlay.patches.cluster_consistency import exchange


@pytest.fixture(autouse=True)
def records_here(tmp_path, monkeypatch):
    """Each exchange keeps a peers record (``observe.records``): in this test's folder, removed by nobody's atexit."""
    monkeypatch.setenv("SGLANG_OVERLAY_STATUS_DIR", str(tmp_path))
    registered = []
    monkeypatch.setattr(exchange.atexit, "register", lambda *a: registered.append(a))
    monkeypatch.setattr(exchange, "_KEPT", set())
    return registered
