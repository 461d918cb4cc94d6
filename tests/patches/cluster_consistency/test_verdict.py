"""The O(N) exchange, in-process: ranks are threads over one ``HashStore`` (the CPU stand-in of the job's TCP store;
``tests/scripts/test_bench_cluster_check.py`` runs the same over a real ``TCPStore``), the store's requests counted
per rank by the benchmark's thin proxy. The verdict's judgement is pure and is tested on lines written by hand."""

from __future__ import annotations

import importlib.util
import threading

import pytest
import torch.distributed as dist

from sglang_overlay.errors import OverlayError
from sglang_overlay.patches.cluster_consistency import exchange
from sglang_overlay.patches.cluster_consistency.peers import MAX_GROUPS, from_ranges, to_ranges
from sglang_overlay.patches.cluster_consistency.state import local_state
from sglang_overlay.patches.cluster_consistency.verdict import arrival, judge
from tests.support.env import REPO

MINE = local_state(0)
_BENCH = importlib.util.spec_from_file_location("bench_cluster_check", REPO / "scripts" / "bench_cluster_check.py")
bench = importlib.util.module_from_spec(_BENCH)
_BENCH.loader.exec_module(bench)
Counted = bench.Counted  # the store as one rank's client, its requests counted (the benchmark's own)


def _job(world: int, nnodes: int, wait_s: float = 5.0, skip=(), change=None) -> dict:
    """Every rank not in ``skip`` as a thread; ``change``: rank -> report fields it changes. rank -> (result, ops)."""
    store, out = dist.HashStore(), {}

    def rank(r):
        client = Counted(store)
        report = {**MINE, "node": r * nnodes // world, "pid": 1000 + r, **(change or {}).get(r, {})}
        try:
            out[r] = (exchange.check_cluster(report["node"], nnodes, (client, r, world), wait_s, report), client.ops)
        except OverlayError as exc:
            out[r] = (exc, client.ops)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world) if r not in skip]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_the_passing_path_is_four_requests_per_rank_and_no_wait_times_out():
    out = _job(32, 4)
    assert all(isinstance(found, dict) and found["verdict"].ok for found, _ in out.values())
    assert max(sum(ops.values()) for _, ops in out.values()) == 4
    completing = [r for r, (_, ops) in out.items() if ops["compare_set"]]
    assert len(completing) == 1 and out[completing[0]][1] == {"append": 1, "add": 1, "get": 1, "compare_set": 1}
    assert all(ops == {"append": 1, "add": 1, "wait": 1, "get": 1} for r, (_, ops) in out.items() if r != completing[0])
    verdict = out[0][0]["verdict"]
    assert [(g.node, g.ranks) for g in verdict.nodes] == [(0, "0-7"), (1, "8-15"), (2, "16-23"), (3, "24-31")]


def test_a_node_0_without_the_overlay_is_named_by_every_other_rank_and_judged_once():
    out = _job(8, 2, wait_s=1, skip=range(4))
    assert sorted(out) == [4, 5, 6, 7]
    for refusal, _ in out.values():
        assert "ranks 0-3 (node 0 by the rank layout) reported no overlay state within 1 s" in str(refusal)
    assert sum(ops["get"] for _, ops in out.values()) == 1 + 3  # one judge read the arrivals; 3 read the verdict
    assert sum(ops["compare_set"] for _, ops in out.values()) == 1


def test_a_differing_rank_is_the_only_one_named_in_every_refusal_its_own_included():
    out = _job(16, 2, change={11: {"patches": [p for p in MINE["patches"] if p != "moe-cp-compaction"]}})
    expected = (
        "rank 11 (node 1, host %s, pid 1011) differs: patches not enabled there: moe-cp-compaction" % MINE["host"]
    )
    for r, (refusal, _) in out.items():
        assert isinstance(refusal, OverlayError) and expected in str(refusal), r
        assert str(refusal).count(") differ") == 1 and len(str(refusal)) < 1024
    assert "rank 11, node 1, host %s, which differs itself" % MINE["host"] in str(out[11][0])


def _lines(reports: dict) -> str:
    return "".join(arrival({**MINE, "node": r // 2, "pid": r, **change}, r) for r, change in reports.items())


def test_the_reference_is_what_most_ranks_share_and_on_a_tie_what_rank_0_shares():
    other = {"overlay": "0.0.9"}
    tie = judge(_lines({0: other, 1: other, 2: {}, 3: {}}), 4, 2, 1.0)
    assert [(g.ranks, g.differs) for g in tie.differing] == [("2-3", ("overlay '0.1.0' there, '0.0.9' here",))]
    most = judge(_lines({0: other, 1: {}, 2: {}, 3: {}}), 4, 2, 1.0)
    assert [(g.ranks, g.pid) for g in most.differing] == [("0", 0)] and most.patches == tuple(MINE["patches"])


def test_a_verdict_names_at_most_max_groups_and_counts_the_rest():
    world = 4 * (MAX_GROUPS + 4)
    lines = _lines({r: {"overlay": f"0.0.{r}"} if r % 4 == 0 else {} for r in range(world) if r % 4 != 1})
    verdict = judge(lines, world, world // 2, 1.0)
    assert len(verdict.missing) + len(verdict.differing) == MAX_GROUPS and verdict.more == 2 * (MAX_GROUPS + 4) - 16
    assert not verdict.ok


@pytest.mark.parametrize("ranks", [[0], [0, 1, 2, 5], [3, 4, 7, 8, 9, 100]])
def test_ranges_round_trip(ranks):
    assert from_ranges(to_ranges(ranks)) == ranks


def test_nodes_and_groups_are_named_by_int_node_host_and_a_pid_only_for_one_rank():
    """Two ranks a node (``_lines``: node r // 2). Node 1 (ranks 2-3) never reported: its host is unknown."""
    verdict = judge(_lines({0: {}, 1: {}, 4: {}, 5: {}}), 6, 3, 1.0)
    assert [(g.ranks, g.node, g.host, g.pid) for g in verdict.missing] == [("2-3", 1, "?", None)]
    found = judge(_lines({0: {}, 1: {}, 2: {}, 4: {}, 5: {}}), 6, 3, 1.0)  # rank 3 missing beside rank 2
    assert [(g.ranks, g.node, g.pid) for g in found.nodes] == [("0-1", 0, None), ("2", 1, 2), ("4-5", 2, None)]
    assert [(g.ranks, g.node, g.host) for g in found.missing] == [("3", 1, MINE["host"])]
    assert all(type(g.node) is int for g in (*found.nodes, *found.missing))


@pytest.mark.parametrize("first, second", [("0.0.7", "0.0.8"), ("0.0.8", "0.0.7")])
def test_differing_groups_are_listed_by_their_first_rank_whatever_their_digests(first, second):
    verdict = judge(_lines({0: {}, 1: {"overlay": first}, 2: {}, 3: {"overlay": second}, 4: {}, 5: {}}), 6, 3, 1.0)
    assert [g.ranks for g in verdict.differing] == ["1", "3"]


def test_a_group_of_ranks_differs_in_every_field_it_differs_in_and_carries_no_pid():
    from sglang_overlay.patches.cluster_consistency.verdict import digest, refusal

    change = {"overlay": "0.0.9", "strict": False}
    verdict = judge(_lines({0: {}, 1: {}, 2: change, 3: change}), 4, 2, 1.0)
    mine = {**MINE, "node": 0}
    text = refusal(verdict, mine, 0, digest(mine))
    assert (
        f"(seen from rank 0, node 0, host {MINE['host']}; compared with the report most ranks share): "
        f"ranks 2-3 (node 1, host {MINE['host']}) differ: overlay '0.0.9' there, '{MINE['overlay']}' here; "
        "strict False there, True here. Start every node"
    ) in text


def test_more_counts_the_groups_left_unnamed_when_missing_and_differing_groups_are_both_named():
    world = 2 * (MAX_GROUPS + 6)  # two ranks a node
    missing = {2, 4}  # two missing groups (nodes 1 and 2), then every node from 3 on differs, each its own way
    reports = {r: ({"overlay": f"0.0.{r // 2}"} if r // 2 >= 3 else {}) for r in range(world)}
    verdict = judge(_lines({r: c for r, c in reports.items() if r not in missing}), world, world // 2, 1.0)
    assert len(verdict.missing) == 2 and len(verdict.differing) == MAX_GROUPS - 2
    assert verdict.more == (world // 2 - 3) - (MAX_GROUPS - 2)  # the differing nodes not named
    from sglang_overlay.patches.cluster_consistency.verdict import digest, refusal

    text = refusal(verdict, {**MINE, "node": 0}, 0, digest(MINE))
    assert f" | {verdict.more} more groups of ranks differ or are missing. " in text


def test_the_digest_is_sixteen_hex_digits_of_what_must_agree():
    import re

    from sglang_overlay.patches.cluster_consistency.verdict import digest

    assert re.fullmatch("[0-9a-f]{16}", digest(MINE))
    assert digest({**MINE, "host": "elsewhere", "pid": 1}) == digest(MINE) != digest({**MINE, "strict": False})


def test_on_one_node_every_missing_rank_is_on_node_0():
    """``--tp-size 4`` on one node: rank 3 never reported, and the rank layout puts it on node 0."""
    verdict = judge("".join(arrival({**MINE, "node": 0, "pid": r}, r) for r in range(3)), 4, 1, 1.0)
    assert [(g.ranks, g.node) for g in verdict.missing] == [("3", 0)]
