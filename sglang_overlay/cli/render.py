"""The CLI's consoles and tables: every report a table that never truncates a patch id or a target.

Columns fold on a narrow terminal; without a terminal (CI logs, pipes) a table takes its natural width.
Invariant: rendering only, no rule. Cost: nothing beyond rich.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def _console(stderr: bool = False) -> Console:
    """A console that never cuts a table: its terminal's width on a terminal, else wide enough for any row."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, soft_wrap=True, width=None if probe.is_terminal else 1000)


console = _console()


err_console = _console(stderr=True)


def _table(title: str, columns: tuple[str, ...]) -> Table:
    """Columns fold (wrap) instead of ending in an ellipsis when the console is narrow."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table
