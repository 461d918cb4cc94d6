"""The job's verdict from every rank's arrival line, and one rank's refusal from it (pure; no store, no torch).

Job: :func:`arrival` is the line a rank appends (its report, its rank and the :func:`digest` of what must agree);
:func:`judge` turns every line that arrived into the one :class:`~sglang_overlay.patches.cluster_consistency.peers.Verdict` all ranks
receive; :func:`refusal` words it for one rank. Invariant: the reference is the report most ranks share (on a tie,
the one the lowest rank shares); ranks are named in groups (one node, one difference), each with node, host, the
pid where a group is one rank, and every difference from the reference; a rank with no line is named with its node
by the rank layout. So every rank refuses naming the same ranks, whichever node lacks the overlay, rank 0's
included. Cost: :func:`judge` is O(N) and runs in one rank per job; a refusal names at most ``MAX_GROUPS`` groups
(a few hundred bytes for one missing or differing rank).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict

from sglang_overlay.core import settings
from sglang_overlay.patches.cluster_consistency.peers import MAX_GROUPS, Group, Verdict, from_ranges, to_ranges
from sglang_overlay.patches.cluster_consistency.state import COMPARED, differences

NOT_THERE = (
    "a rank that reported nothing runs without this overlay (its image lacks sglang-overlay or has another "
    "version of it, or SGLANG_PLUGINS leaves it out, or cluster-consistency is disabled there)"
)


def digest(report: dict) -> str:
    """A short digest of the fields that must agree (``state.COMPARED``)."""
    compared = json.dumps({key: report.get(key) for key in COMPARED}, sort_keys=True)
    return hashlib.sha256(compared.encode()).hexdigest()[:16]


def arrival(report: dict, rank: int) -> str:
    """The line a rank appends to the job's arrivals: its report, rank and digest (one JSON line)."""
    return json.dumps({**report, "rank": rank, "digest": digest(report)}, separators=(",", ":")) + "\n"


def _lines(text: str | bytes) -> dict[int, dict]:
    text = text.decode() if isinstance(text, bytes) else text
    return {int(a["rank"]): a for a in (json.loads(line) for line in text.splitlines() if line.strip())}


def judge(arrivals: str | bytes, world: int, nnodes: int, wait_s: float) -> Verdict:
    """The verdict over every arrival line (ranks without one are missing)."""
    lines = _lines(arrivals)
    by_digest: dict[str, list[int]] = defaultdict(list)
    by_node: dict[int, list[int]] = defaultdict(list)
    for rank, line in sorted(lines.items()):
        by_digest[line["digest"]].append(rank)
        by_node[int(line["node"])].append(rank)
    reference = max(by_digest, key=lambda d: (len(by_digest[d]), -by_digest[d][0]))
    first = lines[by_digest[reference][0]]
    host = {node: lines[ranks[0]]["host"] for node, ranks in by_node.items()}
    per_node = max(1, world // max(1, nnodes))
    absent: dict[int, list[int]] = defaultdict(list)
    for rank in range(world):
        if rank not in lines:
            absent[rank // per_node].append(rank)
    missing = [Group(to_ranges(ranks), node, host.get(node, "?")) for node, ranks in sorted(absent.items())]
    differing = []
    for found, ranks in sorted(by_digest.items(), key=lambda item: item[1][0]):
        if found == reference:
            continue
        per_group: dict[int, list[int]] = defaultdict(list)
        for rank in ranks:
            per_group[int(lines[rank]["node"])].append(rank)
        for node, members in sorted(per_group.items()):
            line = lines[members[0]]
            pid = line.get("pid") if len(members) == 1 else None
            differing.append(Group(to_ranges(members), node, str(line["host"]), pid,
                                   tuple(differences(first, line))))  # fmt: skip
    named_missing = missing[:MAX_GROUPS]
    named_differing = differing[: MAX_GROUPS - len(named_missing)]
    return Verdict(
        ranks=world,
        nnodes=nnodes,
        digest=reference,
        patches=tuple(first.get("patches") or ()),
        wait_s=wait_s,
        nodes=tuple(
            Group(to_ranges(ranks), node, host[node], lines[ranks[0]].get("pid") if len(ranks) == 1 else None)
            for node, ranks in sorted(by_node.items())
        ),
        missing=tuple(named_missing),
        differing=tuple(named_differing),
        more=len(missing) + len(differing) - len(named_missing) - len(named_differing),
    )


def _who(group: Group) -> str:
    return f"rank {group.ranks}" if len(from_ranges(group.ranks)) == 1 else f"ranks {group.ranks}"


def refusal(verdict: Verdict, mine: dict, rank: int, mine_digest: str) -> str:
    """This rank's message: every missing and differing group, the same in every rank."""
    lines = [
        f"{_who(g)} (node {g.node} by the rank layout) reported no overlay state within {verdict.wait_s:g} s"
        for g in verdict.missing
    ]
    for g in verdict.differing:
        where = f"node {g.node}, host {g.host}" + (f", pid {g.pid}" if g.pid is not None else "")
        verb = "differs" if len(from_ranges(g.ranks)) == 1 else "differ"
        lines.append(f"{_who(g)} ({where}) {verb}: {'; '.join(g.differs)}")
    if verdict.more:
        lines.append(f"{verdict.more} more groups of ranks differ or are missing")
    itself = ", which differs itself" if mine_digest != verdict.digest else ""
    tail = f". {NOT_THERE}." if verdict.missing else "."
    return (
        f"the overlay is not the same on every rank (seen from rank {rank}, node {mine['node']}, host "
        f"{mine['host']}{itself}; compared with the report most ranks share): " + " | ".join(lines) + tail
        + f" Start every node from the same image with the same SGLANG_OVERLAY_* settings, or set "
        f"{settings.STRICT}=0 to start anyway."
    )  # fmt: skip
