"""The exchange over a real torch store, in-process: ranks are threads sharing one ``torch.distributed.HashStore``
(a CPU stand-in for the job's TCP store at --dist-init-addr; same API, no sockets), or reports written by hand
for a rank of "another node". No process group exists here: the exchange needs none (no collective)."""

from __future__ import annotations

import logging
import threading

import pytest
import torch.distributed as dist

from sglang_overlay.errors import OverlayError
from sglang_overlay.patches.cluster_consistency import exchange
from sglang_overlay.patches.cluster_consistency.state import local_state
from sglang_overlay.patches.cluster_consistency.verdict import NOT_THERE, arrival, digest
from sglang_overlay.version import __version__


def _ranks(world: int, store, wait_s: float = 5.0, nnodes: int = 2, only=None) -> dict:
    """Run ``check_cluster`` as each rank of ``only`` (default: all) in its own thread; rank -> result/exception."""
    out = {}

    def rank(r):
        try:
            out[r] = exchange.check_cluster(r * nnodes // world, nnodes, group=(store, r, world), wait_s=wait_s)
        except Exception as exc:  # the refusal, collected for the assertions
            out[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in (only if only is not None else range(world))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_equal_ranks_start_and_say_so_once_each(caplog):
    caplog.set_level(logging.INFO, logger="sglang_overlay")
    out = _ranks(4, dist.HashStore())
    assert all(r["missing"] == [] and r["differing"] == {} and r["ranks"] == 4 for r in out.values()), out
    lines = [m for m in caplog.messages if "cluster of 4 ranks consistent" in m]
    assert len(lines) == 4 and not [m for m in caplog.messages if "not the same" in m]


def test_a_rank_that_never_reports_is_named_after_a_bounded_wait():
    """Rank 1 runs without the overlay: it writes nothing. Rank 0 waits its bound, then refuses naming it."""
    (refusal,) = _ranks(2, dist.HashStore(), wait_s=1, only=[0]).values()
    assert isinstance(refusal, OverlayError)
    assert "rank 1 (node 1 by the rank layout) reported no overlay state within 1 s" in str(refusal)
    assert "SGLANG_OVERLAY_STRICT=0" in str(refusal)


def _other_node(store, rank: int, **changes) -> dict:
    """A rank of another node that went through its own exchange up to its wait: appended, counted."""
    report = {**local_state(1), "host": "node-b", "pid": 4242, **changes}
    store.append(exchange.ARRIVALS, arrival(report, rank))
    store.add(exchange.ARRIVED, 1)
    return report


def test_a_rank_with_a_patch_disabled_is_named_with_the_patch():
    store = dist.HashStore()
    patches = local_state(0)["patches"]
    _other_node(store, 1, patches=[p for p in patches if p != "moe-cp-compaction"])
    (refusal,) = _ranks(2, store, only=[0]).values()
    assert isinstance(refusal, OverlayError)
    assert "rank 1 (node 1, host node-b, pid 4242) differs: patches not enabled there: moe-cp-compaction" in str(
        refusal
    )


@pytest.mark.parametrize("field, value", [("overlay", "0.0.9"), ("sglang", "0.5.22"), ("strict", False)])
def test_another_version_or_strictness_is_named(field, value):
    store = dist.HashStore()
    _other_node(store, 1, **{field: value})
    (refusal,) = _ranks(2, store, only=[0]).values()
    assert f"{field} {value!r} there" in str(refusal)


def test_not_strict_warns_once_and_starts(monkeypatch, caplog):
    monkeypatch.setenv("SGLANG_OVERLAY_STRICT", "0")
    store = dist.HashStore()
    _other_node(store, 1, overlay="0.0.9")
    (found,) = _ranks(2, store, only=[0]).values()
    assert found["differing"] == {1: [f"overlay '0.0.9' there, '{__version__}' here"]}
    assert len([m for m in caplog.messages if "not the same on every rank" in m]) == 1


def test_one_process_has_nothing_to_compare():
    class NoStore:
        def __getattr__(self, name):
            raise AssertionError(f"the store was used ({name}) by a job of one process")

    assert exchange.check_cluster(0, 1, group=(NoStore(), 0, 1)) == {"ranks": 1, "missing": [], "differing": {}}
    assert not dist.is_initialized()  # and without a process group at all (a single-process server)
    assert exchange.check_cluster(0, 1)["ranks"] == 1


def test_the_hook_returns_upstreams_result_unchanged():
    from types import SimpleNamespace

    result = object()
    assert exchange.after_group_init(result, server_args=SimpleNamespace(node_rank=0, nnodes=1)) is result


def test_what_a_rank_received_is_kept_for_status_and_removed_at_exit(records_here, monkeypatch):
    """The peers record beside this process's record: the verdict and this rank's digest, not every report."""
    import os

    from sglang_overlay.observe import records
    from sglang_overlay.patches.cluster_consistency import peers

    monkeypatch.setenv("SGLANG_OVERLAY_STRICT", "0")
    store = dist.HashStore()
    _other_node(store, 1, overlay="0.0.9")
    _ranks(3, store, wait_s=1, nnodes=3, only=[0])
    kept = peers.parse(records.read(os.getpid(), peers.KIND)[0])
    assert (kept.rank, kept.node, kept.digest) == (0, 0, digest(local_state(0)))
    verdict = kept.verdict
    assert (verdict.ranks, verdict.nnodes, verdict.digest, verdict.ok) == (3, 3, kept.digest, False)
    assert [(g.ranks, g.node) for g in verdict.missing] == [("2", 2)]
    assert [(g.ranks, g.node, g.host, g.pid, g.differs) for g in verdict.differing] == [
        ("1", 1, "node-b", 4242, (f"overlay '0.0.9' there, '{__version__}' here",))
    ]
    assert [(g.ranks, g.node, g.host) for g in verdict.nodes] == [("0", 0, local_state(0)["host"]), ("1", 1, "node-b")]
    assert records_here == [(records.forget, os.getpid(), peers.KIND)]


def test_without_a_wait_given_the_knob_bounds_it(monkeypatch):
    """Start-up passes no wait: SGLANG_OVERLAY_CLUSTER_WAIT_S bounds it, and the refusal quotes it."""
    monkeypatch.setenv("SGLANG_OVERLAY_CLUSTER_WAIT_S", "1")
    store = dist.HashStore()
    with pytest.raises(
        OverlayError, match=r"rank 1 \(node 1 by the rank layout\) reported no overlay state within 1 s"
    ):
        exchange.check_cluster(0, 2, group=(store, 0, 2))


def test_a_rank_whose_elected_judge_never_publishes_judges_by_itself():
    """Rank 1 is missing, and the rank the ELECTED counter chose (rank 2, say) died before publishing: after its
    second bounded wait rank 0 judges the arrivals itself and names the missing rank, with the wait it used."""
    store = dist.HashStore()
    store.add(exchange.ELECTED, 1)  # another rank was elected first
    (refusal,) = _ranks(3, store, wait_s=1, nnodes=3, only=[0]).values()
    assert isinstance(refusal, OverlayError)
    assert "rank 1 (node 1 by the rank layout) reported no overlay state within 1 s" in str(refusal)
    assert "rank 2 (node 2 by the rank layout) reported no overlay state within 1 s" in str(refusal)
    assert not store.check([exchange.VERDICT])  # judged here, not published


def test_not_strict_logs_the_refusal_under_the_knob_that_allowed_it(monkeypatch, caplog):
    monkeypatch.setenv("SGLANG_OVERLAY_STRICT", "0")
    store = dist.HashStore()
    _other_node(store, 1, overlay="0.0.9")
    _ranks(2, store, only=[0])
    (line,) = [m for m in caplog.messages if "not the same on every rank" in m]
    assert line.startswith("sglang-overlay (SGLANG_OVERLAY_STRICT=0): the overlay is not the same on every rank")


def test_the_checks_cost_is_kept_in_milliseconds_to_two_decimals(monkeypatch):
    """What status shows as the check's share of start-up: wall and CPU milliseconds of this rank, rounded to 0.01."""
    import os

    from sglang_overlay.observe import records
    from sglang_overlay.patches.cluster_consistency import peers

    wall, cpu = iter([10.0, 10.0123456]), iter([5.0, 5.045678])
    monkeypatch.setattr(exchange.time, "perf_counter", lambda: next(wall))
    monkeypatch.setattr(exchange.time, "process_time", lambda: next(cpu))
    store = dist.HashStore()
    _other_node(store, 1)
    found = exchange.check_cluster(0, 2, group=(store, 0, 2), wait_s=1)
    kept = peers.parse(records.read(os.getpid(), peers.KIND)[0])
    assert found["seconds"] == pytest.approx(0.0123456) and (kept.wall_ms, kept.cpu_ms) == (12.35, 45.68)


def test_a_job_with_a_process_group_uses_its_default_store(monkeypatch, caplog):
    """In a server the group is the default process group's (rank, world and the store at --dist-init-addr). The
    group calls are replaced here, for two ranks of one process: no CPU process group of two exists in one process."""
    store = dist.HashStore()
    _other_node(store, 1)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", lambda: store)
    with caplog.at_level(logging.INFO, logger="sglang_overlay"):
        found = exchange.check_cluster(0, 2, wait_s=1)
    assert found["ranks"] == 2 and found["verdict"].ok and store.check([exchange.VERDICT])
    (line,) = [m for m in caplog.messages if "consistent" in m]
    assert line.startswith("sglang-overlay: cluster of 2 ranks consistent (rank 0, node 0; checked in ")


def test_what_ranks_write_to_the_store_is_compact_json():
    """The completing rank reads every rank's line (O(N) bytes) and every rank reads the verdict: no padding."""
    import json

    store = dist.HashStore()
    _other_node(store, 1, overlay="0.0.9")
    _ranks(2, store, only=[0], nnodes=2)
    texts = [*store.get(exchange.ARRIVALS).decode().splitlines(), store.get(exchange.VERDICT).decode()]
    assert len(texts) == 3 and all(t == json.dumps(json.loads(t), separators=(",", ":")) for t in texts), texts


def _later(fn, delay_s: float = 0.3) -> threading.Thread:
    """``fn`` in a thread after ``delay_s``: the rank under test (this thread, so mutation testing sees its calls)
    is then not the one that completes the count, and receives the verdict another rank published."""
    import time

    t = threading.Thread(target=lambda: (time.sleep(delay_s), fn()))
    t.start()
    return t


def test_a_rank_that_does_not_complete_the_count_receives_the_published_verdict():
    store = dist.HashStore()
    late = _later(lambda: exchange.check_cluster(0, 1, group=(store, 1, 2), wait_s=5))
    found = exchange.check_cluster(0, 1, group=(store, 0, 2), wait_s=5)
    late.join(timeout=30)
    assert found["verdict"].ok and found["verdict"].ranks == 2 and found["missing"] == []


def test_a_rank_like_the_reference_is_not_said_to_differ_itself_and_every_finding_is_one_part():
    """Rank 0 has what most ranks have; rank 1 differs and rank 2 never reported (3 ranks, 3 nodes)."""
    store = dist.HashStore()
    _other_node(store, 1, overlay="0.0.9")
    store.append(exchange.ARRIVALS, arrival({**local_state(3), "node": 3}, 3))  # rank 3: like rank 0
    store.add(exchange.ARRIVED, 1)
    with pytest.raises(OverlayError) as refused:
        exchange.check_cluster(0, 4, group=(store, 0, 4), wait_s=1)
    text = str(refused.value)
    assert "which differs itself" not in text and text.count(" | ") == 1
    assert (
        "rank 2 (node 2 by the rank layout) reported no overlay state within 1 s | rank 1 (node 1, host node-b" in text
    )
    assert text.endswith(f". {NOT_THERE}. Start every node from the same image with the same SGLANG_OVERLAY_* "
                         "settings, or set SGLANG_OVERLAY_STRICT=0 to start anyway.")  # fmt: skip


def test_the_hook_checks_with_the_servers_node_rank_and_node_count(monkeypatch):
    """``after_group_init`` as upstream calls it on node 1 of 2: the rank's node and the job's node count are
    the server's (the group calls replaced, as above)."""
    import os
    from types import SimpleNamespace

    from sglang_overlay.observe import records
    from sglang_overlay.patches.cluster_consistency import peers

    store = dist.HashStore()
    store.append(exchange.ARRIVALS, arrival({**local_state(0), "node": 0}, 0))
    store.add(exchange.ARRIVED, 1)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", lambda: store)
    result = object()
    assert exchange.after_group_init(result, server_args=SimpleNamespace(node_rank=1, nnodes=2)) is result
    kept = peers.parse(records.read(os.getpid(), peers.KIND)[0])
    assert (kept.rank, kept.node, kept.verdict.nnodes, kept.verdict.ok) == (1, 1, 2, True)
    assert [(g.ranks, g.node) for g in kept.verdict.nodes] == [("0", 0), ("1", 1)]


def test_a_process_that_checks_twice_removes_its_record_once(records_here):
    import os

    from sglang_overlay.observe import records
    from sglang_overlay.patches.cluster_consistency import peers

    for _ in range(2):
        store = dist.HashStore()
        _other_node(store, 1)
        exchange.check_cluster(0, 2, group=(store, 0, 2), wait_s=1)
    assert records_here == [(records.forget, os.getpid(), peers.KIND)]


def test_a_rank_not_elected_takes_the_verdict_the_elected_rank_publishes_late():
    """Rank 1 never reports; rank 0's first wait times out, another rank is already elected, and that rank
    publishes during rank 0's second wait (at 3 s of 2 + 2): rank 0 refuses with the published verdict."""
    store = dist.HashStore()
    store.add(exchange.ELECTED, 1)
    _other_node(store, 2)  # the elected rank's own line (node 1 of the 3-rank layout's ranks 2)
    late = _later(lambda: exchange._publish(store, 3, 3, 2.0), delay_s=3.0)
    with pytest.raises(
        OverlayError, match=r"rank 1 \(node 1 by the rank layout\) reported no overlay state within 2 s"
    ):
        exchange.check_cluster(0, 3, group=(store, 0, 3), wait_s=2)
    late.join(timeout=30)
    assert store.add(exchange.ELECTED, 0) == 2  # rank 0 asked once, after the rank already elected
