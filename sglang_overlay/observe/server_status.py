"""Which processes of a running local SGLang server carry the overlay (``sglang-overlay status --url``).

Another host's server, or one behind a forwarder (the port's local tree runs neither SGLang nor the overlay:
:func:`serves_sglang`), is asked over HTTP instead (``observe.http_status``).

The server's process tree is found from the URL: the process listening on its port
(the HTTP main process, or the uvicorn/granian supervisor of tokenizer workers),
walked up to the topmost SGLang process and then down to every descendant. Each
process's own record (``observe.processes``, written when its hooks change) says what it
applied; the process title SGLang sets (``sglang::scheduler_TP0``,
``sglang::tokenizer_worker:PID``, ...) says what it is.

A process is *expected* to carry the overlay when it runs patched code: the HTTP
main process and tokenizer workers (http-role patches), schedulers (scheduler-role
patches). An expected process without a record, or with a skipped patch, makes the
answer not OK. Processes that run no patched target (detokenizer, DP controller,
helpers) are listed as such. The records are files on this host. A patch may show records of its own through its
declared ``status_view`` (a :class:`StatusView`: rows of other nodes or ranks, a node or a start-up step per
local process, a detail for ``--json``): cluster-consistency shows there the verdict a local rank received at
start-up (one row per other node, one per rank that reported nothing or differently, ``cluster`` in ``--json``).
Every row is one :class:`Row`, the JSON a report carries.

Records are read only from this user's own private folder (``observe.records``); another folder is refused
(``RecordsUntrusted``), so records another local user planted are never reported. ``live`` is the patches
with a target hooked in that process (a process that imports no target, the detokenizer, has none).

Cost: one ``psutil`` scan of the listening sockets and one small file read per process.

Invariants: read-only (it never signals or changes a process); OK only when every expected
process has a fresh record without skipped patches.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlparse

from sglang_overlay.core import lockfile
from sglang_overlay.core.declarations import resolve
from sglang_overlay.core.registry import discover_patches
from sglang_overlay.observe import records
from sglang_overlay.observe.processes import ProcessRecord, role_from_title

_TITLE_PROCESSES = (("scheduler", "scheduler"), ("tokenizer_worker", "http"))  # title prefix -> patch process kind


class ServerNotFound(LookupError):
    """No local process listens on the URL's port."""


class RecordsUntrusted(LookupError):
    """The records folder is not this user's own private folder (``observe.records``): nothing in it is believed."""


@dataclass(frozen=True)
class Row:
    """One process of the server, or (``remote``) one node or rank another record speaks for. ``expected``: it runs
    patched code, so it must carry the overlay; ``live``: patches with a target hooked there; ``differs``: what a
    remote row's report says differently (empty: the same)."""

    pid: int | None
    role: str
    rank: str
    node: str
    overlay: bool
    expected: bool
    ok: bool
    title: str = ""
    remote: bool = False
    live: list[str] = field(default_factory=list)
    patches: list[str] = field(default_factory=list)
    applied: dict[str, list[str]] = field(default_factory=dict)
    pending_modules: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    differs: list[str] = field(default_factory=list)
    overlay_file: str | None = None
    startup: dict[str, dict] = field(default_factory=dict)


@dataclass(frozen=True)
class StatusView:
    """What a patch's ``status_view(pids, read)`` shows of its own records (``read(pid, kind)``: a process's fresh
    record of that kind, or None): rows of its own, a node number and start-up steps per local pid, and ``detail``
    as the report's ``key`` in ``--json``."""

    key: str
    detail: dict | None = None
    rows: list[Row] = field(default_factory=list)
    node: dict[int, int] = field(default_factory=dict)
    startup: dict[int, dict] = field(default_factory=dict)


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


def _role_and_rank(title: str, record: ProcessRecord | None, is_main: bool) -> tuple[str, str]:
    """The role and rank SGLang's title says (``observe.processes.role_from_title``), else what the record says."""
    titled = role_from_title(title)
    if titled is not None:
        return titled
    named = (record.role if record else None) or ("main" if is_main else "helper")
    return role_from_title(f"sglang::{named}") or (named, "-")


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
    patches = discover_patches(lockfile.read_pin().version)
    kinds_with_patches = {p.process for p in patches if not p.extra}
    procs = {proc.pid: proc for proc in tree}
    views = [_view(p.status_view, procs) for p in patches if p.status_view]
    rows = []
    for proc in tree:
        title = _title(proc)
        raw = _fresh_record(proc)
        record = _parse(raw)
        expected = bool(_patch_processes(title, proc.pid == tree[0].pid) & kinds_with_patches)
        role, rank = _role_and_rank(title, record, proc.pid == tree[0].pid)
        node = next((v.node[proc.pid] for v in views if proc.pid in v.node), None)
        startup = dict(record.startup) if record else {}
        for view in views:
            startup.update(view.startup.get(proc.pid, {}))
        skipped = record.skipped if record else ({"?": "unreadable process record"} if raw else {})
        rows.append(Row(
            pid=proc.pid, title=title.strip(), role=role, rank=rank, overlay=raw is not None, expected=expected,
            ok=(record is not None and not skipped) if expected else not skipped,
            node=_node(record, node), live=sorted(record.applied) if record else [],
            patches=record.patches if record else [], applied=record.applied if record else {},
            pending_modules=record.pending_modules if record else [], skipped=skipped,
            overlay_file=record.overlay_file if record else None, startup=startup,
        ))  # fmt: skip
    rows += [row for view in views for row in view.rows]
    report = {
        "url": url,
        "port": port,
        "ok": all(r.ok for r in rows),
        "processes": [dataclasses.asdict(r) for r in rows],
    }
    return {**report, **{view.key: view.detail for view in views}}


def _parse(raw: dict | None) -> ProcessRecord | None:
    try:
        return ProcessRecord.from_json(raw) if raw else None
    except (AttributeError, KeyError, TypeError, ValueError):  # another overlay version's shape
        return None


def _view(spec: str, procs: dict) -> StatusView:
    """A patch's ``status_view`` over the server's local processes, reading their fresh records of a kind."""
    view: Callable = resolve(spec)
    return view(sorted(procs), lambda pid, kind: _fresh_record(procs[pid], kind))


def _node(record: ProcessRecord | None, node: int | None) -> str:
    """The host, and the node rank where a patch's view knows it (a rank that took part in a cluster check)."""
    host = (record.host if record else None) or socket.gethostname()
    return f"{host} (node {node})" if record and node is not None else host


def remote_row(
    node: str, rank: str, role: str, pid: int | None, overlay: bool, patches: list, differs: list[str]
) -> Row:
    """A row of another node or rank, as a record kept here says (``differs`` empty: the same)."""
    return Row(pid=pid, role=role, rank=rank, node=node, overlay=overlay, expected=True, ok=not differs, remote=True,
               patches=sorted(patches), differs=list(differs))  # fmt: skip
