"""Every rank on every node, or no start: two real SGLang nodes on loopback (``--tp-size 2 --nnodes 2``).

The patch ``cluster-consistency`` has each rank report its overlay through the job's rendezvous store. Each case
is a real two-node launch on this CPU (one rank per node, one core each, NCCL kept out):
- node 1 without the overlay (``SGLANG_PLUGINS`` naming only the CPU stand-ins): node 0 refuses, naming node 1;
- node 1 with one patch disabled: refused, naming the patch;
- both equal: the job starts, serves a completion, and each rank says it checked (and how long it took).
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.support.real_server.cluster import node0_log, two_nodes
from tests.support.real_server.server import ServerConfig, ServerStartError

pytestmark = pytest.mark.e2e

WAIT = (("SGLANG_OVERLAY_CLUSTER_WAIT_S", "10"),)  # the bound a missing rank costs; 20 s by default


def test_a_node_without_the_overlay_is_refused_naming_it(tmp_path):
    with pytest.raises(ServerStartError):
        with two_nodes(tmp_path, node0=ServerConfig(env=WAIT), node1=ServerConfig(overlay=False)):
            pass
    log = node0_log(tmp_path)
    assert "the overlay is not the same on every rank (seen from rank 0, node 0" in log, log[-3000:]
    assert "rank 1 (node 1 by the rank layout) reported no overlay state within 10 s" in log


def test_a_node_with_a_patch_disabled_is_refused_naming_the_patch(tmp_path):
    node1 = ServerConfig(env=(("SGLANG_OVERLAY_DISABLE", "moe-cp-compaction"),))
    with pytest.raises(ServerStartError):
        with two_nodes(tmp_path, node0=ServerConfig(env=WAIT), node1=node1):
            pass
    log = node0_log(tmp_path)
    assert re.search(r"rank 1 \(node 1, host [^,]+, pid \d+\) differs: patches not enabled there: moe-cp-compaction",
                     log), log[-3000:]  # fmt: skip


def test_equal_nodes_start_serve_and_each_rank_says_it_checked(tmp_path):
    with two_nodes(tmp_path) as (node0, node1):
        model = httpx.get(f"{node0.url}/v1/models", timeout=30).json()["data"][0]["id"]
        reply = httpx.post(f"{node0.url}/v1/completions", timeout=120,
                           json={"model": model, "prompt": "2+2=", "max_tokens": 4, "temperature": 0})  # fmt: skip
        assert reply.status_code == 200, reply.text
        logs = {"node 0": node0.log_text(), "node 1": node1.log_text()}
    checked = {name: re.findall(r"cluster of 2 ranks consistent \(rank (\d), node (\d); checked in ([\d.]+) s\)", log)
               for name, log in logs.items()}  # fmt: skip
    assert checked["node 0"][0][:2] == ("0", "0") and checked["node 1"][0][:2] == ("1", "1"), checked
    seconds = [float(found[0][2]) for found in checked.values()]  # a figure for the record, not an assertion
    print(f"cluster check: {seconds} s per rank; node 0 ready in {node0.time_to_ready:.1f} s")
