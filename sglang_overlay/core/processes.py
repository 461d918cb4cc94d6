"""Every SGLang process, or no start: entering processes, saying so, and recording it.

SGLang calls ``load_plugins()`` in some processes only (0.5.20: the main process,
``Engine``, each scheduler). Tokenizer workers (``--tokenizer-worker-num N``) are
started by uvicorn/granian from the import string
``sglang.srt.entrypoints.http_server:app`` and never call it, so a plugin alone is
silently absent there. The overlay therefore enters child processes the way
coverage.py measures subprocesses: a one-line ``.pth`` file in site-packages
(:data:`PTH_NAME`, shipped in the wheel; ``sglang-overlay process-hook --install`` for an
editable install) runs at every interpreter start and does nothing unless
:data:`settings.PROCESS_START` is set. A process where the overlay
applied sets it, so only its descendants react; there, :class:`_TargetImportTrigger`
applies the overlay at the first import of a patch-target module (before that
module executes), and nowhere else. A process that never imports a target module
(the detokenizer in 0.5.20) is left alone: it runs no patched code.

Where the hook is missing, start-up refuses under strict mode (``require_process_hook``) where
such a process could run a patch unpatched (a launch that asks for tokenizer workers, or does not
say, with a patch of the HTTP process enabled), naming the processes and the patches: silent
partial patching is what this rules out.

Visibility: each process where hooks are active logs ONE INFO line
(``sglang-overlay: active pid=... role=... patches=... fingerprints=...``) through its
own stderr handler when logging is not configured yet, so it survives SGLang's
logging set-up, and keeps a JSON record under :func:`status_dir` (``<pid>.json``)
that ``sglang-overlay status --url`` reads per process of a running server.

Cost: the ``.pth`` line is one environment lookup per interpreter start; in a marked
child, one string test per import until the first target module; a record write
(a few hundred bytes) when the process's hooks change.

Invariants: a process is entered once (``apply`` is idempotent); nothing happens in a process
that is not a descendant of an overlay process; a record never outlives its process (removed at
exit, and ``status`` ignores a record older than the process holding its pid).
"""

from __future__ import annotations

import atexit
import importlib.abc
import logging
import os
import socket
import sys
import threading
from pathlib import Path

from sglang_overlay.core import records, settings

logger = logging.getLogger("sglang_overlay")

PTH_NAME = "sglang_overlay_process_start.pth"
# Shipped in the wheel (setup.py writes this line into the wheel's root, so pip's RECORD lists it: uninstall
# removes it, an upgrade replaces it). The import is guarded as coverage.py guards its own: a file left
# behind by a hand install never breaks an interpreter, marked or not.
PTH_LINE = (
    "import os; exec(\"try:\\n if os.environ.get('SGLANG_OVERLAY_PROCESS_START'):\\n"
    "  from sglang_overlay.core.processes import on_interpreter_start; on_interpreter_start()\\n"
    "except ImportError:\\n pass\")\n"
)
# SGLang starts these without load_plugins(): uvicorn/granian spawn them from an import string and they run
# the HTTP app, so a patch of the HTTP process (role "http" or "any") would run unpatched there.
NO_PLUGIN_ROLES = ("http", "any")
_LAUNCHER_ROLES = ("http", "engine", "main")  # the processes that start tokenizer workers
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


# --------------------------------------------------------------------------- the process-start hook


def site_dirs() -> list[Path]:
    """Where a ``.pth`` of this environment is read: its purelib, then any other site-packages on sys.path."""
    import sysconfig

    dirs = [Path(sysconfig.get_paths()["purelib"])]
    dirs += [Path(p) for p in sys.path if p.endswith("site-packages") and Path(p) not in dirs]
    return dirs


def process_hook_path() -> Path | None:
    """The installed ``.pth`` (None when this environment has none, or an outdated one)."""
    for directory in site_dirs():
        path = directory / PTH_NAME
        try:
            if path.read_text(encoding="utf-8") == PTH_LINE:
                return path
        except OSError:
            continue
    return None


def install_process_hook(directory: Path | None = None) -> Path:
    path = Path(directory or site_dirs()[0]) / PTH_NAME
    path.write_text(PTH_LINE, encoding="utf-8")
    return path


def unreached_patches(plan) -> list[str]:
    """Enabled runtime patches that would run in processes SGLang starts without ``load_plugins()``."""
    return [p.id for p in plan.enabled if p.id not in plan.source and p.role in NO_PLUGIN_ROLES]


def tokenizer_workers_requested(argv: list[str] | None = None) -> int | None:
    """How many tokenizer workers this launch asks for, read from SGLang's own command line
    (``--tokenizer-worker-num N``); 1 when the command line is SGLang's launcher without the flag;
    None when it cannot be told (a ``--config`` file, or a program that embeds SGLang)."""
    argv = list(sys.argv if argv is None else argv)
    args = argv[1:]
    for i, arg in enumerate(args):
        if arg == "--tokenizer-worker-num" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--tokenizer-worker-num="):
            value = arg.split("=", 1)[1]
        else:
            continue
        try:
            return int(value)
        except ValueError:
            return None  # SGLang refuses it itself
    if "--config" in args or any(a.startswith("--config=") for a in args):
        return None
    launcher = argv[0] if argv else ""
    if launcher.endswith(("launch_server.py", "/sglang", "sglang-overlay")):
        return 1
    return None


def require_process_hook(plan, role: str | None = None, argv: list[str] | None = None) -> None:
    """Strict: refuse to start when a process SGLang starts without ``load_plugins()`` could run an enabled
    patch's targets unpatched: no ``.pth`` hook in this environment, a patch of the HTTP process enabled,
    and this process one that starts tokenizer workers with more than one asked for (or unknown)."""
    if process_hook_path() is not None or os.environ.get(settings.PROCESS_START):
        return
    at_risk = unreached_patches(plan)
    if not at_risk or (role is not None and role not in _LAUNCHER_ROLES):
        return  # schedulers, detokenizers and DP controllers start no tokenizer worker
    workers = tokenizer_workers_requested(argv)
    if workers == 1:
        return
    from sglang_overlay.errors import OverlayError

    asked = f"--tokenizer-worker-num {workers}" if workers else "possibly more than one, not told by the command line"
    raise OverlayError(
        f"the process-start hook ({PTH_NAME}) is not in {site_dirs()[0]}: SGLang would start the tokenizer worker "
        f"processes ({asked}) without load_plugins(), and patch(es) {at_risk} would run unpatched there. "
        "Reinstall the overlay non-editable (pip install sglang-overlay: the wheel carries the hook), "
        "or write it: sglang-overlay process-hook --install."
    )


def mark_children() -> None:
    """This process applied the overlay: its descendants apply it too (through the ``.pth`` hook)."""
    os.environ[settings.PROCESS_START] = str(os.getpid())


def on_interpreter_start() -> None:
    """Run by the ``.pth`` line in a child of an overlay process: wait for the first target-module import."""
    whitelist = settings.sglang_plugins_whitelist()
    if whitelist is not None and settings.PLUGIN_NAME not in whitelist:
        return  # SGLang would not load the overlay here either
    if not any(isinstance(f, _TargetImportTrigger) for f in sys.meta_path):
        _ENTERED_BY_HOOK.append(os.environ.get(settings.PROCESS_START, ""))
        sys.meta_path.insert(0, _TargetImportTrigger())


class _TargetImportTrigger(importlib.abc.MetaPathFinder):
    """Applies the overlay when a patch-target module is first imported, then hands that import to
    the overlay's own deferred finder (so the module is hooked once it has executed). Stays on
    ``sys.meta_path`` inert afterwards: removing a finder during an import's finder loop could
    make Python skip the next finder."""

    def __init__(self):
        self._modules: frozenset[str] | None = None
        self._fired = False

    def find_spec(self, fullname, path, target=None):
        if self._fired or not fullname.startswith("sglang.srt."):
            return None
        if self._modules is None:
            from sglang_overlay.core import lockfile
            from sglang_overlay.core.registry import discover_patches

            self._modules = frozenset(t.module for p in discover_patches(lockfile.read_pin().version) for t in p.targets)
        if fullname not in self._modules:
            return None
        self._fired = True
        from sglang_overlay.core import hooking

        try:  # the INFO line now only where the role is known; a process that calls load_plugins() says it then
            hooking.apply(announce="sglang.srt.entrypoints.http_server" in sys.modules)
        except Exception as exc:  # strict: this process must not run unpatched
            from sglang_overlay.errors import OverlayStartupError

            raise OverlayStartupError(f"sglang-overlay refused to start (pid {os.getpid()}): {exc}") from exc
        finder = hooking.deferred_finder()
        return finder.find_spec(fullname, path, target) if finder is not None else None


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
        return title[len("sglang::"):]
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


status_dir = records.status_dir


def announce(status: dict, role: str | None = None) -> None:
    """The one INFO line of this process (once), then its record; later calls refresh the record only."""
    if not _ANNOUNCED:
        _ANNOUNCED["role"] = process_role(role)
        patches = sorted(set(status["applied"]) | set(status["pending_patches"]))
        fingerprints = "ok" if not status["skipped"] else "skipped:" + ",".join(sorted(status["skipped"]))
        line = (f"sglang-overlay: active pid={os.getpid()} role={_ANNOUNCED['role']} "
                f"patches={','.join(patches) or '-'} fingerprints={fingerprints}")
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
    record = {"pid": os.getpid(), "ppid": os.getppid(), "role": _ANNOUNCED.get("role") or process_role(),
              "host": socket.gethostname(),
              "applied": status["applied"], "pending_modules": status["pending_modules"],
              "pending_patches": status["pending_patches"], "skipped": status["skipped"],
              "source_form": status["source_form"], "overlay_file": str(Path(__file__).resolve().parents[1])}
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
