"""The reports through the job's own rendezvous store: append, count, one verdict, refuse.

Job: :func:`check_cluster` runs in every rank right after its process group exists, on the default process group's
store (the TCP store at ``--dist-init-addr`` every rank already joined). Each rank appends its report (one JSON
line with its rank and a digest of what must agree) to one key and adds 1 to one counter. The rank whose ``add``
completes the count reads the lines once, judges (``verdict.judge``) and publishes the one verdict
(``compare_set``: the first verdict stands); the others wait for it. When the count is not completed within
``SGLANG_OVERLAY_CLUSTER_WAIT_S`` (a rank runs without the overlay), one rank elected by a second counter judges
the lines that arrived and publishes; a rank that sees no verdict within the wait again judges by itself. A rank
without the overlay never appends: the others stop waiting, name it and refuse; no collective is added, so such
a rank cannot hang the others.

Invariant: strict (default) refuses on any missing or differing rank, naming node, rank, host, pid and
difference, the same in every rank; ``SGLANG_OVERLAY_STRICT=0`` logs one warning and starts. A rank keeps the
verdict and its digest beside its process record (``cluster_consistency.peers``), so ``sglang-overlay status --url`` on one node
lists every node. Every read is of a key known to exist (the rank's own append, or a key a wait returned on), and
every wait is bounded by the knob.

Cost (store operations, all in the pin's torch, 2.14 for 0.5.23): on the passing path each rank
makes 4 requests (``append``, ``add``, ``wait``, ``get``; the completing rank ``get`` and ``compare_set`` instead of
the last two), O(N) for the job, and no wait times out (c10d's timeout warning, which may resolve host names, is
never logged). The completing rank reads N lines once (about 300 bytes each) and every rank reads a verdict that
grows with the number of nodes, not of ranks. A missing rank costs the wait, then one rank's O(N) judgement.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import time
from datetime import timedelta

from sglang_overlay.core import settings
from sglang_overlay.errors import OverlayError
from sglang_overlay.observe import records
from sglang_overlay.patches.cluster_consistency import peers
from sglang_overlay.patches.cluster_consistency.peers import (
    Peers,
    Verdict,
    from_ranges,
    verdict_from_json,
    verdict_to_json,
)
from sglang_overlay.patches.cluster_consistency.settings import WAIT_S
from sglang_overlay.patches.cluster_consistency.state import local_state
from sglang_overlay.patches.cluster_consistency.verdict import arrival, digest, judge, refusal

logger = logging.getLogger("sglang_overlay")
_KEPT: set[int] = set()  # the processes whose peers record is removed at exit
PREFIX = "sglang_overlay/cluster/v2/"  # v2: an overlay of the O(N^2) exchange reads other keys and sees none
ARRIVALS, ARRIVED, VERDICT, ELECTED = (PREFIX + k for k in ("arrivals", "arrived", "verdict", "elected"))


def _default_group():
    """(store, rank, world size) of the default process group; None when there is none (one process)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.distributed_c10d._get_default_store(), dist.get_rank(), dist.get_world_size()


def check_cluster(node_rank: int, nnodes: int, group=None, wait_s: float | None = None, report=None) -> dict:
    """Publish this rank's report and receive the job's verdict; returns what was found (for tests and the log).

    ``group`` is ``(store, rank, world)``, the default process group's when omitted; ``report`` this rank's
    report, ``state.local_state(node_rank)`` when omitted (a benchmark passes one per simulated rank)."""
    group = group or _default_group()
    if group is None or group[2] <= 1:
        return {"ranks": 1, "missing": [], "differing": {}}
    store, rank, world = group
    wait_s = WAIT_S.read() if wait_s is None else wait_s
    started, cpu = time.perf_counter(), time.process_time()
    mine = local_state(node_rank) if report is None else report
    store.append(ARRIVALS, arrival(mine, rank))
    if store.add(ARRIVED, 1) == world:
        verdict = _publish(store, world, nnodes, wait_s)
    else:
        verdict = _receive(store, world, nnodes, wait_s)
    found = {
        "ranks": world,
        "missing": [r for g in verdict.missing for r in from_ranges(g.ranks)],
        "differing": {r: list(g.differs) for g in verdict.differing for r in from_ranges(g.ranks)},
        "seconds": time.perf_counter() - started,
        "verdict": verdict,
    }
    cost = (round(found["seconds"] * 1e3, 2), round((time.process_time() - cpu) * 1e3, 2))
    _keep_for_status(Peers(rank, node_rank, digest(mine), verdict, *cost))
    if not verdict.ok:
        message = refusal(verdict, mine, rank, digest(mine))
        if settings.strict():
            raise OverlayError(message)
        logger.warning("sglang-overlay (%s=0): %s", settings.STRICT, message)
        return found
    logger.info(
        "sglang-overlay: cluster of %d ranks consistent (rank %d, node %d; checked in %.3f s)",
        world,
        rank,
        node_rank,
        found["seconds"],
    )
    return found


def _publish(store, world: int, nnodes: int, wait_s: float) -> Verdict:
    """Judge every line that arrived and publish the verdict; the first one published is every rank's."""
    mine = verdict_to_json(judge(store.get(ARRIVALS), world, nnodes, wait_s))
    return verdict_from_json(json.loads(store.compare_set(VERDICT, "", json.dumps(mine, separators=(",", ":")))))


def _waited(store, key: str, wait_s: float) -> bool:
    try:
        store.wait([key], timedelta(seconds=wait_s))
        return True
    except RuntimeError:  # c10d's DistStoreError (a RuntimeError): the wait timed out
        return False


def _receive(store, world: int, nnodes: int, wait_s: float) -> Verdict:
    """The verdict; after a timed-out wait, published by the one rank the ``ELECTED`` counter elects, or judged
    here when that rank published nothing within the wait either."""
    if _waited(store, VERDICT, wait_s):
        return verdict_from_json(json.loads(store.get(VERDICT)))
    if store.add(ELECTED, 1) == 1:
        return _publish(store, world, nnodes, wait_s)
    if _waited(store, VERDICT, wait_s):
        return verdict_from_json(json.loads(store.get(VERDICT)))
    return judge(store.get(ARRIVALS), world, nnodes, wait_s)


def _keep_for_status(found: Peers) -> None:
    """The verdict and this rank's digest, beside this process's record (removed at exit)."""
    if peers.keep(os.getpid(), found) and os.getpid() not in _KEPT:
        _KEPT.add(os.getpid())
        atexit.register(records.forget, os.getpid(), peers.KIND)


def after_group_init(result, *args, **kwargs):
    """AFTER hook on the upstream function that builds the process groups (called with keyword ``server_args``
    in every release): the exchange, then upstream's result unchanged."""
    server_args = kwargs["server_args"]
    check_cluster(server_args.node_rank, server_args.nnodes)
    return result
