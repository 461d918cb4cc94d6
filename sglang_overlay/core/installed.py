"""The installed upstream: which sglang this environment holds, asked of its metadata, never imported.

Invariant: nothing here imports sglang (``import sglang`` costs seconds and can fail on a broken
install); the version comes from ``importlib.metadata``. Cost: one metadata lookup per call.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys


def installed_sglang_version() -> str | None:
    """The installed sglang's version, or None where no sglang distribution is installed."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def running_python() -> str:
    """This interpreter's ``major.minor``: the key of a pin's wheel in the lock."""
    return "%d.%d" % sys.version_info[:2]


HOOK_REGISTRY = "sglang.srt.plugins.hook_registry"  # what the overlay hooks through: SGLang's own registry


def import_problem() -> str | None:
    """None when the installed sglang imports as far as the overlay needs (its HookRegistry); else why not,
    in one line. Costs what ``import sglang`` costs (seconds): for ``check`` and ``launch``, never start-up."""
    version = installed_sglang_version()
    try:
        importlib.import_module(HOOK_REGISTRY)
    except Exception as exc:  # any failure of a broken install: a missing dependency, a wrong Python, ...
        return (
            f"sglang {version} is installed but does not import ({HOOK_REGISTRY}: {type(exc).__name__}: {exc}); "
            "install its dependencies (pip install sglang==VERSION without --no-deps)"
        )
    return None
