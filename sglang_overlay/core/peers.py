"""The ``peers`` record: what a rank learned about every rank of its job at start-up (one schema, written by the
cluster check, read by ``status``).

Usage::

    verdict = Verdict(ranks=16, nnodes=2, digest="ab12...", patches=("...",), wait_s=20.0,
                      nodes=(Group("0-7", 0, "node-a"), Group("8-15", 1, "node-b")))
    peers.keep(os.getpid(), Peers(rank=3, node=0, digest=verdict.digest, verdict=verdict))
    found = peers.parse(records.read(pid, records.PEERS)[0])   # ValueError on another shape

Model: the job's ranks are grouped, never listed one by one. A :class:`Group` is a set of ranks on one node (as
ranges, ``"0-7,9"``) that share what is said about them: the node's host and, for a group that differs, the
differences from the reference (the report most ranks share; on a tie, the one rank 0's group shares). The
:class:`Verdict` is one per job (the same for every rank): each node's ranks that reported, the ranks that never
reported, the ranks whose report differs. A rank keeps the verdict and its own digest (:class:`Peers`).
Invariant: a record's size grows with the number of nodes and of differing groups (at most ``MAX_GROUPS``
named, the rest counted), never with the number of ranks. Cost: one small file per rank, written once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sglang_overlay.core import records

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
    return records.write(pid, to_json(found), kind=records.PEERS)
