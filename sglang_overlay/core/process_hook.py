"""The process-start hook: the ``.pth`` line that enters processes SGLang starts without ``load_plugins()``.

Tokenizer workers (``--tokenizer-worker-num N``) are started by uvicorn/granian from an import string and
never call ``load_plugins()``. A one-line ``.pth`` in site-packages (:data:`PTH_NAME`, shipped at the
wheel's root; ``sglang-overlay process-hook --install`` for an editable install) runs at every interpreter
start and does nothing unless ``SGLANG_OVERLAY_PROCESS_START`` is set (by an overlay process, so only its
descendants react); there it calls :mod:`sglang_overlay.process_start`. This module knows where the line
lives and which launches need it; it never imports the entry module.

Invariants: the shipped line and the line checked for are this one constant (setup.py reads it from here);
the line's import is guarded, so a leftover file never breaks an interpreter. Cost: one environment lookup
per interpreter start; reading the argv here is a scan of the command line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sglang_overlay.core import settings

PTH_NAME = "sglang_overlay_process_start.pth"
PTH_LINE = (
    "import os; exec(\"try:\\n if os.environ.get('SGLANG_OVERLAY_PROCESS_START'):\\n"
    "  from sglang_overlay.process_start import on_interpreter_start; on_interpreter_start()\\n"
    'except ImportError:\\n pass")\n'
)
# SGLang starts these without load_plugins(): uvicorn/granian spawn them from an import string and they run
# the HTTP app, so a patch of the HTTP process (role "http" or "any") would run unpatched there.
NO_PLUGIN_PROCESSES = ("http", "any")
LAUNCHER_ROLES = ("http", "engine", "main")  # the processes that start tokenizer workers


def mark_children() -> None:
    """This process applied the overlay: its descendants apply it too (the ``.pth`` line reacts to the mark)."""
    os.environ[settings.PROCESS_START] = str(os.getpid())


def site_dirs() -> list[Path]:
    """Where a ``.pth`` of this environment is read: its purelib, then any other site-packages on sys.path."""
    import sysconfig

    dirs = [Path(sysconfig.get_paths()["purelib"])]
    dirs += [Path(p) for p in sys.path if p.endswith("site-packages") and Path(p) not in dirs]
    return dirs


def installed_path() -> Path | None:
    """The installed ``.pth`` (None when this environment has none, or an outdated one)."""
    for directory in site_dirs():
        path = directory / PTH_NAME
        try:
            if path.read_text(encoding="utf-8") == PTH_LINE:
                return path
        except OSError:
            continue
    return None


def install(directory: Path | None = None) -> Path:
    path = Path(directory or site_dirs()[0]) / PTH_NAME
    path.write_text(PTH_LINE, encoding="utf-8")
    return path


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
