"""Processes: what this process is, its one INFO line, and its status record.

Each process where hooks are active logs ONE INFO line (``sglang-overlay: active pid=... role=...
patches=... fingerprints=...``) through its own stderr handler when logging is not configured yet, so it
survives SGLang's logging set-up, and keeps a JSON record (``core.records``) that ``sglang-overlay status
--url`` reads per process of a running server. :func:`mark_children` makes the descendants of an overlay
process apply the overlay too (through ``core.process_hook`` and ``sglang_overlay.process_start``).

Invariants: nothing here applies a patch (this module sits below ``core.hooking``); a record never
outlives its process (removed at exit; ``status`` ignores a record older than the process holding its
pid). Cost: a record write (a few hundred bytes) when the process's hooks change.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import threading
from pathlib import Path

from sglang_overlay.core import records, settings

logger = logging.getLogger("sglang_overlay")

_ROLE_BY_CALLER = {  # the function that called load_plugins() -> the process it runs in
    "run_scheduler_process": "scheduler",
    "run_detokenizer_process": "detokenizer",
    "run_data_parallel_controller_process": "dp_controller",
    "_launch_subprocesses": "http",
    "launch_server": "http",
    "__init__": "engine",
}
_ANNOUNCED: dict = {}
_WRITE_LOCK = threading.Lock()
_ENTERED_BY_HOOK: list[str] = []  # the parent pid that marked this process, when the .pth hook entered it


def mark_children() -> None:
    """This process applied the overlay: its descendants apply it too (through the ``.pth`` hook)."""
    os.environ[settings.PROCESS_START] = str(os.getpid())


def entered_by_hook(parent: str) -> None:
    """The ``.pth`` hook entered this process, marked by ``parent`` (its role then reads as a child's)."""
    _ENTERED_BY_HOOK.append(parent)


# --------------------------------------------------------------------------- visibility


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
        if "sglang.srt.entrypoints.http_server" in sys.modules:
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


_LAST_WRITTEN: dict[int, dict] = {}  # pid -> the record this process last wrote (a fork inherits it)


def write_record(status: dict) -> None:
    """Write this process's record (``core.records``: a private folder, no link followed), unless it is already
    on disk unchanged (SGLang calls load_plugins() more than once in some processes)."""
    record = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "role": _ANNOUNCED.get("role") or process_role(),
        "host": socket.gethostname(),
        "applied": status["applied"],
        "pending_modules": status["pending_modules"],
        "pending_patches": status["pending_patches"],
        "skipped": status["skipped"],
        "overlay_file": str(Path(__file__).resolve().parents[1]),
        "startup": status.get("startup", {}),  # what the overlay cost this process so far (core.startup_cost)
    }
    with _WRITE_LOCK:
        if _LAST_WRITTEN.get(os.getpid()) == record and records.exists(os.getpid()):
            return
        if records.write(os.getpid(), record):
            _LAST_WRITTEN[os.getpid()] = record


def read_record(pid: int) -> dict | None:
    """This user's record of ``pid`` (None when there is none); raises records.UntrustedFolder."""
    found = records.read(pid)
    return found[0] if found else None


def _forget_record() -> None:
    records.forget(os.getpid())
