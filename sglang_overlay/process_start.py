"""Entry point of the process-start hook: what the ``.pth`` line runs in a child of an overlay process.

``core.process_hook`` ships the line; here, :func:`on_interpreter_start` puts :class:`_TargetImportTrigger`
first on ``sys.meta_path``, which applies the overlay (``core.hooking.apply``) at the first import of a
patch-target module, before that module executes, and nowhere else. A process that never imports a target
module is left alone: it runs no patched code.

Invariants: nothing happens unless SGLang would load the plugin here (``SGLANG_PLUGINS``); a process is
entered once; a failure to apply ends the process (strict) instead of letting it run unpatched.
Cost: one string test per import until the first target module; then what ``apply`` costs.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

from sglang_overlay.core import settings
from sglang_overlay.observe import startup_cost

# The rest of the overlay is imported at the first target import, never at interpreter start: a marked
# child that imports no target (or that SGLang would not load the plugin in) pays one environment lookup.


def on_interpreter_start() -> None:
    """Run by the ``.pth`` line in a child of an overlay process: wait for the first target-module import."""
    whitelist = settings.sglang_plugins_whitelist()
    if whitelist is not None and settings.PLUGIN_NAME not in whitelist:
        return  # SGLang would not load the overlay here either
    if not any(isinstance(f, _TargetImportTrigger) for f in sys.meta_path):
        sys.meta_path.insert(0, _TargetImportTrigger(os.environ.get(settings.PROCESS_START, "")))


class _TargetImportTrigger(importlib.abc.MetaPathFinder):
    """Applies the overlay when a patch-target module is first imported, then hands that import to
    the overlay's own deferred finder (so the module is hooked once it has executed). Stays on
    ``sys.meta_path`` inert afterwards: removing a finder during an import's finder loop could
    make Python skip the next finder."""

    def __init__(self, parent: str):
        self._parent = parent  # the pid that marked this process
        self._modules: frozenset[str] | None = None
        self._fired = False

    def find_spec(self, fullname, path, target=None):
        if self._fired or not fullname.startswith("sglang.srt."):
            return None
        if self._modules is None:
            with startup_cost.span("import"):
                from sglang_overlay.core import lockfile
                from sglang_overlay.core.verify import declared_patches

            patches = declared_patches(lockfile.read_pin().version)
            self._modules = frozenset(t.module for p in patches for t in p.targets)
        if fullname not in self._modules:
            return None
        self._fired = True
        with startup_cost.span("import"):
            from sglang_overlay import apply
            from sglang_overlay.core import hooking
            from sglang_overlay.errors import OverlayStartupError
            from sglang_overlay.observe import processes

        processes.entered_by_hook(self._parent)
        try:  # the INFO line now only where the role is known; a process that calls load_plugins() says it then
            apply(announce=processes.HTTP_MODULE in sys.modules)
        except Exception as exc:  # strict: this process must not run unpatched
            raise OverlayStartupError(f"sglang-overlay refused to start (pid {os.getpid()}): {exc}") from exc
        finder = hooking.deferred_finder()
        return finder.find_spec(fullname, path, target) if finder is not None else None
