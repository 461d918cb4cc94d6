"""Processes: what a process is (its role, decided here and only here), its one INFO line, its status record.

Each process where hooks are active logs ONE INFO line (``sglang-overlay: active pid=... role=...
patches=... fingerprints=...``) through its own stderr handler when logging is not configured yet, so it
survives SGLang's logging set-up, and keeps one :class:`ProcessRecord` (JSON, ``observe.records``) that
``sglang-overlay status --url`` reads per process of a running server. A role is read from SGLang's process
title where there is one (:func:`role_from_title`: the same function reads another process's title in
``observe.server_status``), else from the function that called ``load_plugins()``, else from how the process
started.

Invariants: nothing here applies a patch or decides whether a process starts (``core.hooking`` tells this
module what happened, through ``sglang_overlay.observe``); a record never outlives its process (removed at
exit; ``status`` ignores a record older than the process holding its pid). Cost: a record write (a few
hundred bytes) when the process's hooks change.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import re
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from sglang_overlay.observe import records, startup_cost

logger = logging.getLogger("sglang_overlay")

_ROLE_BY_CALLER = {  # the function that called load_plugins() -> the process it runs in
    "run_scheduler_process": "scheduler",
    "run_detokenizer_process": "detokenizer",
    "run_data_parallel_controller_process": "dp_controller",
    "_launch_subprocesses": "http",
    "launch_server": "http",
    "__init__": "engine",
}
_RANKED = re.compile(r"^(scheduler|data_parallel_controller|detokenizer)_((?:[A-Z]+\d+_?)+)$")
HTTP_MODULE = "sglang.srt.entrypoints.http_server"  # where upstream's FastAPI ``app`` lives
_ANNOUNCED: dict = {}
_WRITE_LOCK = threading.Lock()
_ENTERED_BY_HOOK: list[str] = []  # the parent pid that marked this process, when the .pth hook entered it


@dataclass(frozen=True)
class ProcessRecord:
    """What one process keeps of the overlay: who it is, what it hooked, what waits, what it skipped (non-strict),
    where the overlay was imported from, and what the overlay cost it so far (``observe.startup_cost``)."""

    pid: int
    ppid: int
    role: str
    host: str
    applied: dict[str, list[str]] = field(default_factory=dict)  # patch id -> targets hooked
    pending_modules: list[str] = field(default_factory=list)
    pending_patches: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # patch id -> why
    overlay_file: str | None = None
    startup: dict[str, dict] = field(default_factory=dict)  # step -> {count, wall_ms, cpu_ms, modules}

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: dict) -> ProcessRecord:
        """A kept record; TypeError/KeyError/ValueError when it has another shape (another overlay version)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})

    @property
    def patches(self) -> list[str]:
        """The patches this process runs or will run once their modules import."""
        return sorted(set(self.applied) | set(self.pending_patches))


def entered_by_hook(parent: str) -> None:
    """The ``.pth`` hook entered this process, marked by ``parent`` (its role then reads as a child's)."""
    _ENTERED_BY_HOOK.append(parent)


def role_from_title(title: str) -> tuple[str, str] | None:
    """SGLang's title of a process (``sglang::scheduler_TP1``, ``sglang::tokenizer_worker:PID``) as role and rank
    (``scheduler``, ``TP1``; ``-`` where there is no rank); None where the title is not SGLang's."""
    if "sglang::" not in title:
        return None
    words = title.split("sglang::", 1)[1].split()
    name = re.sub(r":\d+$", "", words[0] if words else "?")  # tokenizer_worker:<pid>: the pid has its own column
    match = _RANKED.match(name)
    return (match.group(1), match.group(2)) if match else (name, "-")


def process_role(caller_hint: str | None = None) -> str:
    """What this process is, as far as it can tell: SGLang's process title (``sglang::<role>``), the
    function that called ``load_plugins()``, or how it started."""
    try:
        import setproctitle

        title = setproctitle.getproctitle()
    except Exception:
        title = ""
    if title.startswith("sglang::"):
        return title[len("sglang::") :]
    if caller_hint:
        return caller_hint
    if _ENTERED_BY_HOOK:
        if HTTP_MODULE in sys.modules:
            return "tokenizer_worker"  # a child that runs the HTTP app: uvicorn/granian worker
        return f"child_of_{os.getppid()}"
    return "main"


def caller_role() -> str | None:
    """The role implied by the function that called SGLang's ``load_plugins()`` (None when not found)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "load_plugins" and frame.f_back is not None:
            return _ROLE_BY_CALLER.get(frame.f_back.f_code.co_name)
        frame = frame.f_back
    return None


def announce(status: dict, role: str | None = None) -> None:
    """The one INFO line of this process (once), then its record; later calls refresh the record only."""
    if not _ANNOUNCED:
        _ANNOUNCED["role"] = process_role(role)
        patches = sorted(set(status["applied"]) | set(status["pending_patches"]))
        fingerprints = "ok" if not status["skipped"] else "skipped:" + ",".join(sorted(status["skipped"]))
        line = (
            f"sglang-overlay: active pid={os.getpid()} role={_ANNOUNCED['role']} "
            f"patches={','.join(patches) or '-'} fingerprints={fingerprints}"
        )
        _log_visibly(line)
        atexit.register(_forget_record)
    write_record(status)


def _log_visibly(line: str) -> None:
    """INFO through the configured handlers; before any logging set-up, through a stderr handler of its own."""
    if logging.getLogger().handlers or logger.handlers:
        if logger.getEffectiveLevel() > logging.INFO:
            logger.warning(line)  # an operator who lowered the level still sees that the overlay is active
        else:
            logger.info(line)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s"))
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, line, None, None)
    handler.handle(record)


_LAST_WRITTEN: dict[int, ProcessRecord] = {}  # pid -> the record this process last wrote (a fork inherits it)


def write_record(status: dict) -> None:
    """Write this process's record (``observe.records``: a private folder, no link followed), unless it is already
    on disk unchanged (SGLang calls load_plugins() more than once in some processes)."""
    record = ProcessRecord(
        pid=os.getpid(),
        ppid=os.getppid(),
        role=_ANNOUNCED.get("role") or process_role(),
        host=socket.gethostname(),
        applied=status["applied"],
        pending_modules=status["pending_modules"],
        pending_patches=status["pending_patches"],
        skipped=status["skipped"],
        overlay_file=str(Path(__file__).resolve().parents[1]),
        startup=startup_cost.snapshot(),
    )
    with _WRITE_LOCK:
        if _LAST_WRITTEN.get(os.getpid()) == record and records.exists(os.getpid()):
            return
        if records.write(os.getpid(), record.to_json()):
            _LAST_WRITTEN[os.getpid()] = record


def read_record(pid: int) -> ProcessRecord | None:
    """This user's record of ``pid`` (None when there is none, or of another shape); raises records.UntrustedFolder."""
    found = records.read(pid)
    if not found:
        return None
    try:
        return ProcessRecord.from_json(found[0])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _forget_record() -> None:
    records.forget(os.getpid())
