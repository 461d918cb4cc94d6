"""SGLang general-plugin entry point (group ``sglang.srt.plugins``, name ``sglang_overlay``).

SGLang calls :func:`load` from ``load_plugins()`` in the main process, ``Engine`` and every scheduler
process (processes it starts without that call are entered through ``sglang_overlay.process_start``).
``load_plugins`` swallows ``Exception``s from plugins, so verification failures leave here as
``OverlayStartupError`` (a ``SystemExit``): start-up ends with the message instead of running unpatched.

Invariants: whatever makes apply() fail leaves here as ``OverlayStartupError``; the process's role for its
INFO line comes from the function that called ``load_plugins()``. Cost: what ``core.hooking.apply`` costs
(a few milliseconds).
"""

from __future__ import annotations

from sglang_overlay.observe import startup_cost

with startup_cost.span("import"):  # the core, as far as this process had not imported it
    from sglang_overlay import apply
    from sglang_overlay.core import hooking  # noqa: F401 (imported here, so counted as the overlay's import)
    from sglang_overlay.errors import OverlayError, OverlayStartupError
    from sglang_overlay.observe import processes


def load() -> None:
    try:
        apply(role=processes.caller_role())
    except (OverlayError, OSError, ValueError) as exc:
        raise OverlayStartupError(f"sglang-overlay refused to start: {exc}") from exc
