"""Which processes of a running local SGLang server carry the overlay (``sglang-overlay status --url``).

Another host's server, or one behind a forwarder (the port's local tree runs neither SGLang nor the overlay:
:func:`serves_sglang`), is asked over HTTP instead (``core.http_status``).

The server's process tree is found from the URL: the process listening on its port
(the HTTP main process, or the uvicorn/granian supervisor of tokenizer workers),
walked up to the topmost SGLang process and then down to every descendant. Each
process's own record (``core.processes``, written when its hooks change) says what it
applied; the process title SGLang sets (``sglang::scheduler_TP0``,
``sglang::tokenizer_worker:PID``, ...) says what it is.

A process is *expected* to carry the overlay when it runs patched code: the HTTP
main process and tokenizer workers (http-role patches), schedulers (scheduler-role
patches). An expected process without a record, or with a skipped patch, makes the
answer not OK. Processes that run no patched target (detokenizer, DP controller,
helpers) are listed as such. The records are files on this host; the other nodes come from the verdict a local
rank received at start-up (its ``peers`` record, ``core.peers``, written by a patch that checks the cluster
through the job's rendezvous store): one row per other node (its ranks, with the patches they reported enabled;
what is live there is not known here), and one row per rank that reported nothing or differently (not OK).
``--json`` adds the whole verdict (``cluster``).

Records are read only from this user's own private folder (``core.records``); another folder is refused
(``RecordsUntrusted``), so records another local user planted are never reported. ``live`` is the patches
with a target hooked in that process (a process that imports no target, the detokenizer, has none).

Cost: one ``psutil`` scan of the listening sockets and one small file read per process.

Invariants: read-only (it never signals or changes a process); OK only when every expected
process has a fresh record without skipped patches.
"""

from __future__ import annotations

import re
import socket
from urllib.parse import urlparse

from sglang_overlay.core import lockfile, peers, records
from sglang_overlay.core.peers import from_ranges
from sglang_overlay.core.registry import discover_patches

_TITLE_PROCESSES = (("scheduler", "scheduler"), ("tokenizer_worker", "http"))  # title prefix -> patch process kind


class ServerNotFound(LookupError):
    """No local process listens on the URL's port."""


class RecordsUntrusted(LookupError):
    """The records folder is not this user's own private folder (``core.records``): nothing in it is believed."""


_RANKED = re.compile(r"^(scheduler|data_parallel_controller|detokenizer)_((?:[A-Z]+\d+_?)+)$")


def _listener(port: int):
    import psutil

    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return psutil.Process(conn.pid)
    raise ServerNotFound(f"no local process listens on port {port} (status reads this host's processes only)")


def is_local_host(url: str) -> bool:
    """Whether ``url`` names this host (so a listener on its port here is the one the URL reaches)."""
    import psutil

    parsed = urlparse(url if "://" in url else f"http://{url}")
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(parsed.hostname or "localhost", None)}
    except OSError:
        return False
    here = {a.address.split("%")[0] for nics in psutil.net_if_addrs().values() for a in nics}
    return all(a in here or a.startswith("127.") or a in ("::1", "0.0.0.0", "::") for a in addresses)


def serves_sglang(report: dict) -> bool:
    """Whether the process holding the port (or the SGLang server above it) runs SGLang or the overlay: not a
    forwarder such as ``kubectl port-forward`` or an SSH tunnel (whose children, a test's servers, do not count)."""
    top = report["processes"][0]  # the topmost SGLang process above the listener, else the listener itself
    return top["overlay"] or _is_server_process(top["title"])


def _title(proc) -> str:
    try:
        return " ".join(proc.cmdline()) or proc.name()
    except Exception:
        return "?"


_SERVER_PROCESS = re.compile(r"sglang::|\bsglang\.launch_server\b|(^|/)sglang serve\b")


def _is_server_process(title: str) -> bool:
    """An SGLang server process (``python -m sglang.launch_server``, ``sglang serve``, a titled
    ``sglang::...`` child), not merely a command with "sglang" in it: ``scripts/demo.py`` and a
    test runner start servers as their children and must not be taken for the server's main process."""
    return bool(_SERVER_PROCESS.search(title))


def _server_tree(listener):
    """The topmost SGLang server ancestor of the listener and all its descendants."""
    top = listener
    for parent in listener.parents():
        if _is_server_process(_title(parent)):
            top = parent
    return [top] + top.children(recursive=True)


def _fresh_record(proc, kind: str | None = None) -> dict | None:
    """The process's record (of ``kind``), unless it is a leftover of an earlier process with the same pid."""
    try:
        found = records.read(proc.pid, kind)
    except records.UntrustedFolder as exc:
        raise RecordsUntrusted(
            f"refusing to read process records: {exc} (only a folder of this user's own, "
            "private, holds records this user's processes wrote)"
        ) from exc
    if found is None:
        return None
    record, written = found
    try:
        if written + 1 < proc.create_time():
            return None
    except Exception:  # psutil.Error: the process went
        return None
    return record


def _role_and_rank(title: str, record: dict | None, is_main: bool) -> tuple[str, str]:
    """SGLang's process title without its padding, split into role and rank (``scheduler_TP1`` ->
    ``scheduler``, ``TP1``; ``scheduler_DP0_TP1`` -> ``scheduler``, ``DP0_TP1``)."""
    if "sglang::" in title:
        name = title.split("sglang::", 1)[1].split()[0] if title.split("sglang::", 1)[1].split() else "?"
    else:
        name = (record or {}).get("role") or ("main" if is_main else "helper")
    name = re.sub(r":\d+$", "", name)  # tokenizer_worker:<pid>: the pid has its own column
    match = _RANKED.match(name)
    return (match.group(1), match.group(2)) if match else (name, "-")


def _patch_processes(title: str, is_main: bool) -> set[str]:
    """The kinds of process (``Patch.process``) a process of this title is, whose patches it should run."""
    if is_main:
        return {"http", "any"}
    body = title.split("sglang::", 1)[1] if "sglang::" in title else ""
    return {kind for prefix, kind in _TITLE_PROCESSES if body.startswith(prefix)} | ({"any"} if body else set())


def server_status(url: str) -> dict:
    """Per process of the server at ``url``: pid, title, role, whether the overlay is there and what it applied."""
    parsed = urlparse(url if "://" in url else f"http://{url}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    listener = _listener(port)
    tree = _server_tree(listener)
    kinds_with_patches = {p.process for p in discover_patches(lockfile.read_pin().version) if not p.extra}
    found, unreadable = _parsed({proc.pid: _fresh_record(proc, records.PEERS) for proc in tree})
    rows = []
    for proc in tree:
        title = _title(proc)
        record = _fresh_record(proc)
        expected = bool(_patch_processes(title, proc.pid == tree[0].pid) & kinds_with_patches)
        role, rank = _role_and_rank(title, record, proc.pid == tree[0].pid)
        row = {
            "pid": proc.pid,
            "title": title.strip(),
            "overlay": record is not None,
            "expected": expected,
            "role": role,
            "rank": rank,
            "node": _node(record, found.get(proc.pid)),
            "live": sorted((record or {}).get("applied", {})),
            "patches": sorted(set((record or {}).get("applied", {})) | set((record or {}).get("pending_patches", []))),
            "applied": (record or {}).get("applied", {}),
            "pending_modules": (record or {}).get("pending_modules", []),
            "skipped": (record or {}).get("skipped", {}),
            "overlay_file": (record or {}).get("overlay_file"),
            "startup": _startup(record, found.get(proc.pid)),
        }
        row["ok"] = (record is not None and not row["skipped"]) if expected else not row["skipped"]
        rows.append(row)
    rows += _cluster_rows(found) + unreadable
    cluster = peers.to_json(next(iter(found.values()))) if found else None  # the whole verdict, for tools
    return {"url": url, "port": port, "ok": all(r["ok"] for r in rows), "processes": rows, "cluster": cluster}


def _node(record: dict | None, found: peers.Peers | None) -> str:
    """The host, and the node rank where this process is a rank that took part in a cluster check."""
    host = (record or {}).get("host") or socket.gethostname()
    return f"{host} (node {found.node})" if record and found else host


def _startup(record: dict | None, found: peers.Peers | None) -> dict:
    """What the overlay cost this process at start-up (``core.startup_cost``), the cluster check included."""
    cost = dict((record or {}).get("startup") or {})
    if found is not None:
        cost["cluster_check"] = {"count": 1, "wall_ms": found.wall_ms, "cpu_ms": found.cpu_ms, "modules": 0}
    return cost


def _parsed(raw: dict) -> tuple[dict, list[dict]]:
    """pid -> its parsed peers record, and one row that is not OK per record of another shape."""
    found, unreadable = {}, []
    for pid, record in raw.items():
        if not record:
            continue
        try:
            found[pid] = peers.parse(record)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # another overlay version's shape
            unreadable.append({**_row(f"{socket.gethostname()} (node ?)", "?", "peers", pid, True, [],
                                      [f"unreadable peers record of pid {pid}: {exc!r}"]), "ok": False})  # fmt: skip
    return found, unreadable


def _cluster_rows(found: dict) -> list[dict]:
    """From the verdict a local rank kept: one row per other node (its ranks, the same or not), then one row per
    rank that reported nothing or differs (on any node)."""
    if not found:
        return []
    here = next(iter(found.values()))
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
        rows.append(_row(f"{hosts.get(node, '?')} (node {node})", label, "node", pids.get(node), node in reported, patches,
                         bad.get(node, [])))  # fmt: skip
    for g in verdict.missing:
        rows += [_row(f"{g.host} (node {g.node})", f"rank{r}", "rank", None, False, [], ["reported no overlay state"])
                 for r in from_ranges(g.ranks)]  # fmt: skip
    for g in verdict.differing:
        rows += [_row(f"{g.host} (node {g.node})", f"rank{r}", "rank", g.pid, True, [], list(g.differs))
                 for r in from_ranges(g.ranks)]  # fmt: skip
    if verdict.more:
        rows.append(_row("?", "-", "rank", None, True, [], [f"{verdict.more} more groups differ or are missing"]))
    return rows


def _row(node: str, rank: str, role: str, pid, overlay: bool, patches: list, differs: list[str]) -> dict:
    """A row of another node or rank, as the verdict a local rank received says (``differs`` empty: the same)."""
    return {
        "pid": pid,
        "title": "",
        "overlay": overlay,
        "expected": True,
        "remote": True,
        "role": role,
        "rank": rank,
        "node": node,
        "live": [],
        "patches": sorted(patches),
        "applied": {},
        "pending_modules": [],
        "skipped": {},
        "differs": differs,
        "overlay_file": None,
        "ok": not differs,
    }
