"""sglang-overlay: a fork-style patch set over one pinned upstream SGLang release.

Importing this package changes nothing. Patches are applied when SGLang loads its general plugins (entry
point ``sglang_overlay`` in ``sglang.srt.plugins``), or by an explicit :func:`apply` in programs that embed
SGLang without its launcher.
"""

from sglang_overlay.observe import startup_cost

with startup_cost.span("import"):  # the overlay's own start-up cost (``observe.startup_cost``)
    from sglang_overlay.version import __version__


def apply(lock_path=None, role: str | None = None, announce: bool = True) -> dict:
    """Verify and apply every enabled patch in this process, observed (``sglang_overlay.observe``: its record,
    INFO line, metrics, status route); see ``sglang_overlay.core.hooking.apply``. Every entry point starts here."""
    from sglang_overlay import observe
    from sglang_overlay.core import hooking

    observe.attach()
    return hooking.apply(lock_path, role=role, announce=announce)


__all__ = ["__version__", "apply"]
