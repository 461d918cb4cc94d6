"""``scripts/bench_cluster_check.py --quick``: 64 ranks through the exchange over a real ``TCPStore`` on loopback
(each rank a thread of this process with its own client; the wait-timeout path of a real store included).
Counts and verdicts, never times. ci_slow: about 50 s on 2 loaded cores, nearly all of it c10d naming each new
socket's peer and each timed-out wait's by reverse DNS (5 s stalls here); it proves the store operations on the
pin's torch."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.support.env import REPO


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_cluster_check", REPO / "scripts" / "bench_cluster_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def records_here(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_OVERLAY_STATUS_DIR", str(tmp_path / "status"))


@pytest.mark.ci_slow
@pytest.mark.parametrize("case", [[], ["--missing", "0"], ["--differ", "37"]], ids=["equal", "missing-0", "differ-37"])
def test_64_ranks_over_a_real_tcp_store(bench, tmp_path, case):
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--wait", "1", *case, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    running = 63 if "--missing" in case else 64
    assert result["ranks"] == 64 and result["named_correctly"] is True
    assert result["refusals"] == (running if case else 0)
    if not case:  # the passing path: 4 requests per rank, none of them a wait that timed out
        assert result["store_ops_per_rank_max"] == 4 and result["store_ops_total"] == 4 * 64
        assert result["store_ops_by_name"] == {"append": 64, "add": 64, "wait": 63, "get": 64, "compare_set": 1}
    else:
        assert 0 < result["max_message_bytes"] <= 1024
    if "--missing" in case:  # one elected rank judged (one read of the arrivals); the others read its verdict
        assert result["store_ops_by_name"]["compare_set"] == 1 and result["store_ops_by_name"]["get"] == running
