"""Which processes of a running local SGLang server carry the overlay (``sglang-overlay status --url``).

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
helpers) are listed as such. The records are files on this host; the ranks of other nodes come from
what a local rank received from them at start-up (its ``peers`` record, written by a patch that exchanges
reports, e.g. through the job's rendezvous store): one row per remote rank, with the patches it reported
enabled (what is live there is not known here), and a rank that reported nothing or differently is not OK.

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

from sglang_overlay.core import lockfile, records
from sglang_overlay.core.registry import discover_patches

_TITLE_ROLES = (("scheduler", "scheduler"), ("tokenizer_worker", "http"))  # title prefix -> patch role


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


def _title(proc) -> str:
    try:
        return " ".join(proc.cmdline()) or proc.name()
    except Exception:
        return "?"


_SERVER_PROCESS = re.compile(r"sglang::|\bsglang\.launch_server\b|(^|/)sglang serve\b")


def _is_server_process(title: str) -> bool:
    """An SGLang server process (``python -m sglang.launch_server``, ``sglang serve``, a titled
    ``sglang::...`` child), not merely a command with "sglang" in it: ``sglang-overlay demo`` and a
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


def _expected_roles(title: str, is_main: bool) -> set[str]:
    if is_main:
        return {"http", "any"}
    body = title.split("sglang::", 1)[1] if "sglang::" in title else ""
    return {role for prefix, role in _TITLE_ROLES if body.startswith(prefix)} | ({"any"} if body else set())


def server_status(url: str) -> dict:
    """Per process of the server at ``url``: pid, title, role, whether the overlay is there and what it applied."""
    parsed = urlparse(url if "://" in url else f"http://{url}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    listener = _listener(port)
    tree = _server_tree(listener)
    roles_with_patches = {p.role for p in discover_patches(lockfile.read_pin().version) if not p.extra}
    peers = {proc.pid: _fresh_record(proc, records.PEERS) for proc in tree}  # what each local rank received
    rows = []
    for proc in tree:
        title = _title(proc)
        record = _fresh_record(proc)
        expected = bool(_expected_roles(title, proc.pid == tree[0].pid) & roles_with_patches)
        role, rank = _role_and_rank(title, record, proc.pid == tree[0].pid)
        row = {
            "pid": proc.pid,
            "title": title.strip(),
            "overlay": record is not None,
            "expected": expected,
            "role": role,
            "rank": rank,
            "node": _node(record, peers[proc.pid]),
            "live": sorted((record or {}).get("applied", {})),
            "patches": sorted(set((record or {}).get("applied", {})) | set((record or {}).get("pending_patches", []))),
            "applied": (record or {}).get("applied", {}),
            "pending_modules": (record or {}).get("pending_modules", []),
            "skipped": (record or {}).get("skipped", {}),
            "overlay_file": (record or {}).get("overlay_file"),
        }
        row["ok"] = (record is not None and not row["skipped"]) if expected else not row["skipped"]
        rows.append(row)
    rows += _remote_rows(tree, peers)
    return {"url": url, "port": port, "ok": all(r["ok"] for r in rows), "processes": rows}


def _node(record: dict | None, peers: dict | None) -> str:
    """The host, and the node rank where this process is a rank that took part in a cluster exchange."""
    host = (record or {}).get("host") or socket.gethostname()
    mine = ((peers or {}).get("reports") or {}).get(str((peers or {}).get("rank"))) if record else None
    return f"{host} (node {mine['node']})" if mine and mine.get("node") is not None else host


def _remote_rows(tree, received: dict) -> list[dict]:
    """One row per rank another node reported to a local rank (``received``: pid -> its ``peers`` record);
    local ranks are skipped."""
    here, local = socket.gethostname(), {proc.pid for proc in tree}
    rows: dict[int, dict] = {}
    unreadable = []
    for proc in tree:
        peers = received.get(proc.pid)
        if not peers:
            continue
        try:
            per_node = max(1, int(peers.get("ranks", 1)) // max(1, int(peers.get("nnodes", 1))))
            for key, report in (peers.get("reports") or {}).items():
                if int(key) in rows or (report.get("host") == here and report.get("pid") in local):
                    continue
                rows[int(key)] = _remote_row(int(key), report, (peers.get("differing") or {}).get(key) or [])
            for rank in peers.get("missing") or ():
                rows.setdefault(int(rank), _remote_row(int(rank), {"node": int(rank) // per_node}, None))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # another overlay version's shape
            row = _remote_row(-1, {"host": here}, [f"unreadable peers record of pid {proc.pid}: {exc!r}"])
            unreadable.append({**row, "rank": "?", "role": "peers", "pid": proc.pid, "ok": False})
    return [rows[r] for r in sorted(rows)] + unreadable


def _remote_row(rank: int, report: dict, differs: list[str] | None) -> dict:
    """A rank of another node as it reported itself (``differs`` None: it reported nothing)."""
    role, ranked = _role_and_rank(report.get("title") or "", None, False)
    host = report.get("host", "?")
    return {
        "pid": report.get("pid"),
        "title": report.get("title") or "",
        "overlay": differs is not None,
        "expected": True,
        "remote": True,
        "role": role if report.get("title") else "rank",
        "rank": ranked if ranked != "-" else f"rank{rank}",
        "node": f"{host} (node {report['node']})" if report.get("node") is not None else host,
        "live": [],
        "patches": sorted(report.get("patches") or ()),
        "applied": {},
        "pending_modules": [],
        "skipped": {},
        "differs": ["reported no overlay state"] if differs is None else differs,
        "overlay_file": None,
        "ok": differs == [],
    }
