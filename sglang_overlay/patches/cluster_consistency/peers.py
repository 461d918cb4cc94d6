"""The ``peers`` record: what a rank learned about every rank of its job at start-up (one schema, written by the
cluster check, read by ``status``).

Usage::

    verdict = Verdict(ranks=16, nnodes=2, digest="ab12...", patches=("...",), wait_s=20.0,
                      nodes=(Group("0-7", 0, "node-a"), Group("8-15", 1, "node-b")))
    peers.keep(os.getpid(), Peers(rank=3, node=0, digest=verdict.digest, verdict=verdict))
    found = peers.parse(records.read(pid, peers.KIND)[0])   # ValueError on another shape

Model: the job's ranks are grouped, never listed one by one. A :class:`Group` is a set of ranks on one node (as
ranges, ``"0-7,9"``) that share what is said about them: the node's host and, for a group that differs, the
differences from the reference (the report most ranks share; on a tie, the one rank 0's group shares). The
:class:`Verdict` is one per job (the same for every rank): each node's ranks that reported, the ranks that never
reported, the ranks whose report differs. A rank keeps the verdict and its own digest (:class:`Peers`).
:func:`status_view` is what ``sglang-overlay status`` shows of it (the patch's declared ``status_view``): one row
per other node, one per rank that reported nothing or differently, the node and the check's cost of each local
rank, and the whole verdict as ``cluster`` in ``--json``.
Invariant: a record's size grows with the number of nodes and of differing groups (at most ``MAX_GROUPS``
named, the rest counted), never with the number of ranks. Cost: one small file per rank, written once.
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass

from sglang_overlay.observe import records
from sglang_overlay.observe.server_status import Row, StatusView, remote_row

KIND = "peers"  # the record kind, beside the process's own record (``observe.records``)
SCHEMA = 2
MAX_GROUPS = 16  # differing or missing groups named in a verdict; the rest are counted in ``more``


def to_ranges(ranks) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (sorted, duplicates dropped)."""
    spans: list[list[int]] = []
    for r in sorted(set(ranks)):
        if spans and spans[-1][1] == r - 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def from_ranges(text: str) -> list[int]:
    """``"0-2,5"`` -> ``[0, 1, 2, 5]``; ValueError on anything else."""
    out: list[int] = []
    for part in filter(None, str(text).split(",")):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


@dataclass(frozen=True)
class Group:
    """Ranks of one node that share what is said about them (``pid``: the first rank's, when one rank)."""

    ranks: str
    node: int
    host: str = "?"
    pid: int | None = None
    differs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """One job's finding, the same for every rank. ``ok``: every rank reported the reference's overlay."""

    ranks: int
    nnodes: int
    digest: str
    patches: tuple[str, ...]
    wait_s: float
    nodes: tuple[Group, ...] = ()
    missing: tuple[Group, ...] = ()
    differing: tuple[Group, ...] = ()
    more: int = 0

    @property
    def ok(self) -> bool:
        return not (self.missing or self.differing or self.more)


@dataclass(frozen=True)
class Peers:
    """What one rank keeps: its rank, node and digest, the job's verdict, and what the check cost it."""

    rank: int
    node: int
    digest: str
    verdict: Verdict
    wall_ms: float = 0.0  # what the check cost this rank (its share of the process's start-up)
    cpu_ms: float = 0.0


def verdict_to_json(verdict: Verdict) -> dict:
    return {"schema": SCHEMA, **dataclasses.asdict(verdict)}


def to_json(found: Peers) -> dict:
    return {"schema": SCHEMA, **dataclasses.asdict(found), "verdict": verdict_to_json(found.verdict)}


def _group(raw: dict) -> Group:
    from_ranges(raw["ranks"])  # a shape check: ranges or ValueError
    pid = raw.get("pid")
    return Group(str(raw["ranks"]), int(raw["node"]), str(raw.get("host", "?")), None if pid is None else int(pid),
                 tuple(str(d) for d in raw.get("differs") or ()))  # fmt: skip


def verdict_from_json(raw: dict) -> Verdict:
    """A verdict as published; ValueError (or KeyError/TypeError) when it has another shape."""
    if raw.get("schema") != SCHEMA:
        raise ValueError(f"peers schema {raw.get('schema')!r}, this overlay reads {SCHEMA}")
    return Verdict(
        ranks=int(raw["ranks"]),
        nnodes=int(raw["nnodes"]),
        digest=str(raw["digest"]),
        patches=tuple(str(p) for p in raw["patches"]),
        wait_s=float(raw["wait_s"]),
        nodes=tuple(_group(g) for g in raw["nodes"]),
        missing=tuple(_group(g) for g in raw["missing"]),
        differing=tuple(_group(g) for g in raw["differing"]),
        more=int(raw.get("more", 0)),
    )


def parse(raw: dict) -> Peers:
    """A kept record; ValueError (or KeyError/TypeError) when it has another shape (another overlay version)."""
    if raw.get("schema") != SCHEMA:
        raise ValueError(f"peers schema {raw.get('schema')!r}, this overlay reads {SCHEMA}")
    return Peers(int(raw["rank"]), int(raw["node"]), str(raw["digest"]), verdict_from_json(raw["verdict"]),
                 float(raw.get("wall_ms", 0.0)), float(raw.get("cpu_ms", 0.0)))  # fmt: skip


def keep(pid: int, found: Peers) -> bool:
    """Write ``found`` beside the process's record (kind ``peers``); False when the folder is refused."""
    return records.write(pid, to_json(found), kind=KIND)


def status_view(pids: list[int], read) -> StatusView:
    """What ``status`` shows of the verdicts the server's local ranks kept (``read(pid, KIND)``)."""
    found: dict[int, Peers] = {}
    unreadable: list[Row] = []
    for pid in pids:
        raw = read(pid, KIND)
        if not raw:
            continue
        try:
            found[pid] = parse(raw)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # another overlay version's shape
            unreadable.append(remote_row(f"{socket.gethostname()} (node ?)", "?", "peers", pid, True, [],
                                         [f"unreadable peers record of pid {pid}: {exc!r}"]))  # fmt: skip
    if not found:
        return StatusView("cluster", rows=unreadable)
    return StatusView(
        "cluster",
        detail=to_json(next(iter(found.values()))),  # the whole verdict, for tools
        rows=_cluster_rows(next(iter(found.values()))) + unreadable,
        node={pid: f.node for pid, f in found.items()},
        startup={
            pid: {"cluster_check": {"count": 1, "wall_ms": f.wall_ms, "cpu_ms": f.cpu_ms, "modules": 0}}
            for pid, f in found.items()
        },  # fmt: skip
    )


def _cluster_rows(here: Peers) -> list[Row]:
    """From the verdict a local rank kept: one row per other node (its ranks, the same or not), then one row per
    rank that reported nothing or differs (on any node)."""
    verdict = here.verdict
    bad: dict[int, list[str]] = {}
    for g in verdict.missing:
        bad.setdefault(g.node, []).append(f"ranks {g.ranks} reported no overlay state")
    for g in verdict.differing:
        bad.setdefault(g.node, []).append(f"ranks {g.ranks} differ: {'; '.join(g.differs)}")
    hosts = {g.node: g.host for g in verdict.nodes}
    reported = {g.node: g.ranks for g in verdict.nodes}
    pids = {g.node: g.pid for g in verdict.nodes}
    rows = []
    for node in sorted(set(reported) | set(bad)):
        if node == here.node:
            continue
        label = f"ranks {reported[node]}" if node in reported else "-"
        patches = list(verdict.patches) if node in reported else []
        rows.append(remote_row(f"{hosts.get(node, '?')} (node {node})", label, "node", pids.get(node),
                               node in reported, patches, bad.get(node, [])))  # fmt: skip
    for g in verdict.missing:
        rows += [remote_row(f"{g.host} (node {g.node})", f"rank{r}", "rank", None, False, [],
                            ["reported no overlay state"]) for r in from_ranges(g.ranks)]  # fmt: skip
    for g in verdict.differing:
        rows += [remote_row(f"{g.host} (node {g.node})", f"rank{r}", "rank", g.pid, True, [], list(g.differs))
                 for r in from_ranges(g.ranks)]  # fmt: skip
    if verdict.more:
        rows.append(remote_row("?", "-", "rank", None, True, [], [f"{verdict.more} more groups differ or are missing"]))
    return rows
