"""A meta-path finder that finds nothing itself: it calls back as each watched module finishes executing.

``AfterExecFinder(watched, executed, on_import)``, first on ``sys.meta_path``: for a module ``watched(name)``
asks for, it takes the spec the finders after it would give and wraps the loader, so ``executed(name, before)``
runs right after the module's body (``before``: ``sys.modules``'s names as its execution began);
``on_import()`` runs at every import it is asked about. ``core.hooking`` owns what is watched and why.

Invariants: the module is found and loaded by upstream's own finders and loaders (the wrapper delegates every
attribute, for ``inspect`` and ``linecache``); a module nobody watches is untouched. Cost: one ``watched`` call
(and ``on_import``) per import while the finder is installed.
"""

from __future__ import annotations

import importlib.abc
import sys


class _AfterExecLoader(importlib.abc.Loader):
    """Delegates to the real loader, then calls back."""

    def __init__(self, inner, module: str, executed):
        self._inner, self._module, self._executed = inner, module, executed

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        before = frozenset(sys.modules)
        self._inner.exec_module(module)
        self._executed(self._module, before)

    def __getattr__(self, name):  # get_source, get_filename, ... for inspect/linecache
        return getattr(self._inner, name)


class AfterExecFinder(importlib.abc.MetaPathFinder):
    def __init__(self, watched, executed, on_import=None):
        self._watched, self._executed, self._on_import = watched, executed, on_import

    def find_spec(self, fullname, path, target=None):
        if self._on_import is not None:
            self._on_import()
        if not self._watched(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None:
            spec.loader = _AfterExecLoader(spec.loader, fullname, self._executed)
        return spec
