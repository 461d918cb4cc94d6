"""sglang-overlay: a fork-style patch set over one pinned upstream SGLang release.

Importing this package changes nothing. Patches are applied when SGLang loads its general plugins (entry
point ``sglang_overlay`` in ``sglang.srt.plugins``), or by an explicit :func:`apply` in programs that embed
SGLang without its launcher.
"""

from sglang_overlay.core import startup_cost

with startup_cost.span("import"):  # the overlay's own start-up cost (``core.startup_cost``)
    from sglang_overlay.version import __version__


def apply(lock_path=None) -> dict:
    """Verify and apply every enabled patch in this process; see sglang_overlay.core.hooking."""
    from sglang_overlay.core.hooking import apply as _apply

    return _apply(lock_path)


__all__ = ["__version__", "apply"]
