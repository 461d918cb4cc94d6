"""A script of ``scripts/`` loaded as a module of this process, for tests of its pure parts (no server).

Invariant: the script runs top to bottom as ``python scripts/NAME.py`` would, minus ``main()``. Cost: one import.
"""

from __future__ import annotations

import importlib.util

from tests.support.env import REPO


def load_script(name: str):
    """``scripts/<name>.py`` as a fresh module (loading it may put scripts/ on sys.path, as running it does)."""
    path = REPO / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
