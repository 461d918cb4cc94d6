"""The reports through the job's own rendezvous store: publish, wait (bounded), compare, refuse.

Job: :func:`check_cluster` runs in every rank right after its process group exists. Each rank writes its
report under ``sglang_overlay/cluster/<rank>`` in the default process group's store (the TCP store at
``--dist-init-addr`` every rank already joined), then waits at most ``SGLANG_OVERLAY_CLUSTER_WAIT_S`` for every
rank's report and compares. A rank without the overlay never writes: the others stop waiting, name it and
refuse; no collective is added, so such a rank cannot hang the others.
Invariant: strict (default) refuses on any missing or different rank, naming node, rank and difference;
``SGLANG_OVERLAY_STRICT=0`` logs one warning and starts. What a rank found is kept beside its process record
(``core.records``, kind ``peers``), so ``sglang-overlay status --url`` on one node lists every rank of every node.
Cost: one store write and one read per rank (milliseconds: the INFO line says how long), one small file
write, plus the wait when a rank is missing.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import time
from datetime import timedelta

from sglang_overlay.core import records, settings
from sglang_overlay.errors import OverlayError
from sglang_overlay.patches.cluster_consistency.settings import WAIT_S
from sglang_overlay.patches.cluster_consistency.state import differences, local_state

logger = logging.getLogger("sglang_overlay")
_KEPT: set[int] = set()  # the processes whose peers record is removed at exit
KEY = "sglang_overlay/cluster/{}"


def _default_group():
    """(store, rank, world size) of the default process group; None when there is none (one process)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.distributed_c10d._get_default_store(), dist.get_rank(), dist.get_world_size()


def check_cluster(node_rank: int, nnodes: int, group=None, wait_s: float | None = None) -> dict:
    """Publish this rank's report and compare every rank's; returns what was found (for tests and the log).

    ``group`` is ``(store, rank, world)``, the default process group's when omitted."""
    group = group or _default_group()
    if group is None or group[2] <= 1:
        return {"ranks": 1, "missing": [], "differing": {}}
    store, rank, world = group
    wait_s = WAIT_S.read() if wait_s is None else wait_s
    started = time.perf_counter()
    mine = local_state(node_rank)
    store.set(KEY.format(rank), json.dumps(mine))
    keys = [KEY.format(r) for r in range(world)]
    try:
        store.wait(keys, timedelta(seconds=wait_s))
    except Exception:  # a timeout: some rank never reported; which ones is read below
        pass
    missing = [r for r in range(world) if not store.check([KEY.format(r)])]
    reports = {r: json.loads(store.get(KEY.format(r))) for r in range(world) if r not in missing}
    differing = {r: d for r, theirs in reports.items() if r != rank and (d := differences(mine, theirs))}
    found = {"ranks": world, "missing": missing, "differing": differing, "seconds": time.perf_counter() - started}
    _keep_for_status(rank, nnodes, found, reports)
    if missing or differing:
        message = _refusal(mine, rank, world, nnodes, missing, differing, reports, wait_s)
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


def _keep_for_status(rank: int, nnodes: int, found: dict, reports: dict) -> None:
    """Every rank's report as this rank received it, beside this process's record (removed at exit)."""
    kept = {
        "rank": rank,
        "nnodes": nnodes,
        "ranks": found["ranks"],
        "reports": {str(r): report for r, report in reports.items()},
        "missing": found["missing"],
        "differing": {str(r): d for r, d in found["differing"].items()},
    }
    if records.write(os.getpid(), kept, kind=records.PEERS) and os.getpid() not in _KEPT:
        _KEPT.add(os.getpid())
        atexit.register(records.forget, os.getpid(), records.PEERS)


def _refusal(mine, rank, world, nnodes, missing, differing, reports, wait_s) -> str:
    per_node = max(1, world // max(1, nnodes))
    lines = []
    for r in missing:
        lines.append(
            f"rank {r} (node {r // per_node} by the rank layout) reported no overlay state within "
            f"{wait_s:g} s: it runs without the overlay (its image lacks sglang-overlay, or SGLANG_PLUGINS "
            "leaves it out, or cluster-consistency is disabled there)"
        )
    for r, found in sorted(differing.items()):
        theirs = reports[r]
        lines.append(
            f"rank {r} (node {theirs.get('node')}, host {theirs.get('host')}, pid {theirs.get('pid')}) "
            f"differs: {'; '.join(found)}"
        )
    return (
        f"the overlay is not the same on every rank (seen from rank {rank}, node {mine['node']}, host "
        f"{mine['host']}): " + " | ".join(lines) + ". Start every node from the same image with the same "
        f"SGLANG_OVERLAY_* settings, or set {settings.STRICT}=0 to start anyway."
    )


def after_group_init(result, *args, **kwargs):
    """AFTER hook on the upstream function that builds the process groups (called with keyword ``server_args``
    in every release): the exchange, then upstream's result unchanged."""
    server_args = kwargs["server_args"]
    check_cluster(server_args.node_rank, server_args.nnodes)
    return result
