#!/usr/bin/env python
"""The cluster-consistency check at scale: N simulated ranks through the patch's own exchange, over a real TCPStore.

Usage::

    python scripts/bench_cluster_check.py --ranks 1024 --procs 8 --json /tmp/cc.json
    python scripts/bench_cluster_check.py --ranks 128 --procs 4 --missing 77
    python scripts/bench_cluster_check.py --ranks 128 --procs 4 --differ 9 --before 712b7c1

Each rank is a thread with its own TCPStore client (the job's store at ``--dist-init-addr`` is one TCPStore that
every rank joins), in ``--procs`` processes; the master runs in this process on loopback. All ranks are released
at once (a start key outside the count), each runs ``exchange.check_cluster`` with its own report (node by the
rank layout, ``--ranks-per-node`` per node; ``--differ R``: rank R has a patch disabled; ``--missing R``: rank R
never runs, so the others wait ``--wait`` seconds) and its store requests are counted. ``--before REV`` also runs
the exchange as of git REV (the O(N^2) one: ``712b7c1``) side by side, in the same run.

Writes (``--json``): ``ranks``, ``store_ops_total``, ``store_ops_per_rank_max``, ``seconds_to_last_verdict``,
``named_correctly`` (every rank's refusal names exactly the right rank, or every rank passes) and
``max_message_bytes`` (the longest refusal), per exchange. Goals (issue 29): at most 8 requests per rank on the
passing path, the last verdict within 1 s at N = 1,024, the bad rank named correctly by all at N = 128 with no
refusal over 1 KB. Figures on a loaded machine are upper bounds. Cost: N sockets and threads; seconds.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import multiprocessing
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_common import add_output_flags, write_json  # noqa: E402

EXCHANGE = "sglang_overlay/patches/cluster_consistency/exchange.py"
_CLIENTS: dict = {}  # (port, rank) -> a rank's client; "master" -> this process's master (--procs 0 reuses both)
_RUNS: list[str] = []  # each run's key prefix
NAMED = re.compile(r"\branks? ([\d,-]+) \((?:node|rank)")  # each group a refusal names: "rank 7 (node 0, ..."


class Counted:
    """One rank's store client: each request it makes, counted by name."""

    def __init__(self, store):
        self.store, self.ops = store, collections.Counter()

    def __getattr__(self, name):
        self.ops[name] += 1
        return getattr(self.store, name)


def _ranges(text: str) -> set[int]:
    out = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def _exchange(before: str | None, report_of):
    """The exchange module: this tree's, or git ``before``'s (its ``local_state`` answering each rank's report)."""
    if before is None:
        from sglang_overlay.patches.cluster_consistency import exchange

        return lambda node, nnodes, group, wait_s, report: exchange.check_cluster(node, nnodes, group, wait_s, report)
    source = subprocess.run(["git", "show", f"{before}:{EXCHANGE}"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout  # fmt: skip
    spec = importlib.util.spec_from_loader(f"exchange_{before}", loader=None)
    old = importlib.util.module_from_spec(spec)
    exec(compile(source, f"{before}:{EXCHANGE}", "exec"), old.__dict__)
    old.local_state = lambda node: report_of()
    return lambda node, nnodes, group, wait_s, report: old.check_cluster(node, nnodes, group, wait_s)


def _worker(port: int, ranks: list[int], args: dict, out, own_process: bool = True) -> None:
    """One process: a thread and a client per rank; waits for the start key, runs the exchange, reports back."""
    if own_process:  # in this process (--procs 0) the records go where the caller keeps them
        os.environ["SGLANG_OVERLAY_STATUS_DIR"] = args["status_dir"]
    restore = _one_writer_at_a_time()
    try:
        _threads(port, ranks, args, out)
    finally:
        restore()


def _threads(port: int, ranks: list[int], args: dict, out) -> None:
    import torch.distributed as dist

    from sglang_overlay.errors import OverlayError
    from sglang_overlay.patches.cluster_consistency.state import local_state

    base, local = local_state(0), threading.local()
    check = _exchange(args["before"], lambda: local.report)
    world, per_node = args["ranks"], args["ranks_per_node"]
    results = []
    # one client per rank, opened one after the other: a burst of connects overflows the master's listen queue
    # and c10d's connect then backs off for seconds
    # (c10d names each new socket's peer by reverse DNS: where that is slow, a connect takes seconds; the clients
    # of this process are kept for its next run, each run's keys under their own prefix, as a job's are)
    for r in ranks:
        if (port, r) not in _CLIENTS:
            _CLIENTS[port, r] = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=300),
                                              wait_for_workers=False)  # fmt: skip

    def rank(r: int) -> None:
        raw = dist.PrefixStore(args["prefix"], _CLIENTS[port, r])
        node = r // per_node
        local.report = {**base, "node": node, "host": f"node{node}.bench", "title": f"sglang::scheduler_TP{r}"}
        if r == args["differ"]:
            local.report["patches"] = [p for p in base["patches"] if p != "moe-cp-compaction"]
        raw.add("ready", 1)
        raw.wait(["go"], timedelta(seconds=300))
        client, message = Counted(raw), None
        _VERDICT_AT.t = None
        try:
            check(node, max(1, world // per_node), (client, r, world), args["wait"], local.report)
        except OverlayError as exc:
            message = str(exc)
        at = _VERDICT_AT.t or time.time()  # the old exchange keeps its record otherwise: its return then
        results.append((r, sum(client.ops.values()), dict(client.ops), at, message))

    threads = [threading.Thread(target=rank, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(results)


_VERDICT_AT = threading.local()  # when this thread's rank had its verdict (the moment it goes to keep it)


def _one_writer_at_a_time():
    """Ranks here are threads sharing one pid, so one peers record: its writes take turns (one rank per process
    in a job writes its own file, in parallel), and a rank's verdict time is taken before its turn. Returns what
    puts it back."""
    from sglang_overlay.patches.cluster_consistency import peers

    keep, lock = peers.keep, threading.Lock()

    def serialised(*a, **kw):
        _VERDICT_AT.t = time.time()
        with lock:
            return keep(*a, **kw)

    peers.keep = serialised
    return lambda: setattr(peers, "keep", keep)


def run(args: argparse.Namespace, before: str | None = None) -> dict:
    """One exchange (this tree's, or ``before``'s) for ``args.ranks`` ranks; the figures the issue asks for."""
    import torch.distributed as dist

    if args.procs == 0 and "master" in _CLIENTS:  # this process's store and clients again, under a new prefix
        master = _CLIENTS["master"]
    else:
        master = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=300), wait_for_workers=False)
        _CLIENTS["master"] = master
    prefix = f"run{len(_RUNS)}"
    _RUNS.append(prefix)
    port, master = master.port, dist.PrefixStore(prefix, master)
    running = [r for r in range(args.ranks) if r != args.missing]
    shared = {"ranks": args.ranks, "ranks_per_node": args.ranks_per_node, "wait": args.wait, "differ": args.differ,
              "before": before, "status_dir": tempfile.mkdtemp(prefix="bench-cluster-"), "prefix": prefix}  # fmt: skip
    if args.procs == 0:  # every rank a thread of this process (the test's way: no interpreter to start)
        out = queue.Queue()
        procs = [threading.Thread(target=_worker, args=(port, running, shared, out, False))]
    else:
        context = multiprocessing.get_context("spawn")
        out = context.Queue()
        procs = [context.Process(target=_worker, args=(port, running[i :: args.procs], shared, out))
                 for i in range(args.procs)]  # fmt: skip
    for p in procs:
        p.start()
    master.wait(["ready"], timedelta(seconds=600))
    while int(master.add("ready", 0)) < len(running):  # every rank's client open: all released at once
        time.sleep(0.05)
    started = time.time()
    master.set("go", "1")
    results = [row for _ in procs for row in out.get(timeout=600)]
    for p in procs:
        p.join()
    bad = args.missing if args.missing is not None else args.differ
    named = [set().union(*(_ranges(m) for m in NAMED.findall(msg))) if msg else set() for *_, msg in results]
    correct = all(n == ({bad} if bad is not None else set()) for n in named)
    return {
        "exchange": before or "this tree",
        "ranks": args.ranks,
        "store_ops_total": sum(row[1] for row in results),
        "store_ops_per_rank_max": max(row[1] for row in results),
        "store_ops_by_name": dict(sum((collections.Counter(row[2]) for row in results), collections.Counter())),
        "seconds_to_last_verdict": round(max(row[3] for row in results) - started, 4),
        "named_correctly": correct,
        "refusals": sum(1 for *_, msg in results if msg),
        "max_message_bytes": max((len(msg.encode()) for *_, msg in results if msg), default=0),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, help="simulated ranks (the job's world size; 64 with --quick)")
    parser.add_argument(
        "--procs", type=int, default=4, help="processes the ranks are spread over (threads in each; 0: this process)"
    )
    parser.add_argument("--ranks-per-node", type=int, default=8, help="ranks per node (the rank layout)")
    bad = parser.add_mutually_exclusive_group()
    bad.add_argument("--missing", type=int, metavar="R", help="rank R runs without the overlay (never reports)")
    bad.add_argument("--differ", type=int, metavar="R", help="rank R has moe-cp-compaction disabled")
    parser.add_argument("--wait", type=float, default=2.0, help="SGLANG_OVERLAY_CLUSTER_WAIT_S of every rank")
    parser.add_argument("--before", metavar="REV", help="also run the exchange as of git REV, side by side")
    add_output_flags(parser, "64 ranks (unless --ranks), as threads of this process (--procs 0)", png=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.ranks, args.procs = args.ranks or 64, 0
    if args.ranks is None:
        parser.error("--ranks N is required (or --quick)")
    for name in ("missing", "differ"):
        if getattr(args, name) is not None and not 0 <= getattr(args, name) < args.ranks:
            parser.error(f"--{name} {getattr(args, name)}: a rank of 0..{args.ranks - 1}")
    if args.ranks < 2 or not 0 <= args.procs <= args.ranks:
        parser.error("--ranks at least 2, --procs between 0 (threads of this process) and --ranks")
    rows = [run(args, rev) for rev in ([args.before] if args.before else []) + [None]]
    print(f"cluster check, {args.ranks} ranks in {args.procs} processes, {args.ranks_per_node} per node"
          + (f", rank {args.missing} missing" if args.missing is not None else "")
          + (f", rank {args.differ} differs" if args.differ is not None else ""))  # fmt: skip
    cols = ("exchange", "store_ops_total", "store_ops_per_rank_max", "seconds_to_last_verdict", "named_correctly",
            "max_message_bytes")  # fmt: skip
    print(" | ".join(f"{c:>24}" for c in cols))
    for row in rows:
        print(" | ".join(f"{str(row[c]):>24}" for c in cols))
    result = {**rows[-1], "before": rows[0] if args.before else None}
    if write_json(args.json, result):
        print(f"wrote {args.json}")
    return 0 if all(r["named_correctly"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
