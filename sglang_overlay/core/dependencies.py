"""What a patch's hooks rely on upstream without hooking it, found mechanically: the lock's ``dependencies``.

``sglang-overlay lock`` writes what :func:`find` returns into each pin's lock, and start-up, ``check`` and
``rebase-check`` verify the lock's list (``core.lockfile.dependencies_of``), so a new call to an upstream name
is locked (and refused at start-up when it changes) the moment the lock is regenerated, and ``lock --check``
fails until it is. For each patch, the hook modules it runs on the installed release (the patch's root and the
release folder serving this release, less its ``probe.py``: a probe that loses a name says "cannot tell", it
never runs unlocked code in a server) are parsed. An upstream name they use is one of:

- an attribute (``x.name``, or ``getattr/setattr/hasattr/delattr(x, "name")``) whose name is defined by an upstream
  class the hooks touch: the targets' owner classes, the classes of the targets' modules and of the upstream
  modules the hooks import from, with their sglang bases (the most specific class's definition wins);
- a function imported from sglang (``from sglang.srt.x import f``).

A name the patch hooks is a target, not a dependency. Not covered: instance attributes set only in ``__init__``
(no definition of their own) and names every container has (``clear``, ``get``, ...: a set's ``clear`` is not the
allocator's). Invariant: the answer depends only on the hook modules' text and the installed upstream; nothing
is hooked. Cost: importing the targets' modules (seconds: the lock tool's, never start-up's) and one parse
of each hook module and each upstream module a name is defined in.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import warnings
from pathlib import Path

from sglang_overlay.core import fingerprint
from sglang_overlay.core.declarations import Dependency, Patch
from sglang_overlay.core.introspection import TargetNotFound, find_definition, resolve_owner
from sglang_overlay.core.registry import releases_of

_ACCESSORS = {"getattr", "setattr", "hasattr", "delattr"}
# names every container has: ``x.clear()`` on a set is not the allocator's ``clear`` (not covered, by design)
_GENERIC = set(dir(dict)) | set(dir(list)) | set(dir(set)) | set(dir(str)) | set(dir(tuple))


def hook_files(patch: Patch, version: str) -> tuple[Path, list[Path]]:
    """The patch's folder and its modules that run on ``version``: its root and the folder serving it (not other
    folders). An extra patch declared in a plain module: that module and its targets' hook modules."""
    package = importlib.import_module(patch.package)
    root = Path(package.__file__).parent
    if not hasattr(package, "__path__"):
        hooks = {package.__name__, *(t.hook_module for t in patch.targets)}
        return root, sorted({Path(importlib.import_module(m).__file__) for m in hooks})
    other = {r.folder for r in releases_of(package) if not r.applies_to(version)}
    return root, sorted(
        f for f in root.rglob("*.py") if f.name != "probe.py" and not (set(f.relative_to(root).parts[:-1]) & other)
    )


def find(patch: Patch, version: str) -> tuple[Dependency, ...]:
    """The upstream definitions the hooks of ``patch`` (as ``version`` sees it: ``Patch.for_upstream``) use there,
    not hooked: one :class:`Dependency` each, ``needed_by`` its hook modules (dotted, from the patch's folder)."""
    root, files = hook_files(patch, version)
    hooked = {(t.module, t.qualname) for t in patch.targets}
    users: dict[tuple[str, str], set[str]] = {}
    with warnings.catch_warnings():  # importing upstream's modules on a machine without its devices warns
        warnings.simplefilter("ignore")
        names = _upstream_names(patch, files)
        for path in files:
            inside = path.is_relative_to(root)
            hook_module = ".".join(path.relative_to(root).with_suffix("").parts) if inside else path.stem
            for definition in _used(path, names) - hooked:
                users.setdefault(definition, set()).add(hook_module)
    ordered = sorted(users.items(), key=lambda item: f"{item[0][0]}.{item[0][1]}")
    return tuple(Dependency(module, qualname, ",".join(sorted(where))) for (module, qualname), where in ordered)


def _imported_upstream_modules(files: list[Path]) -> set[str]:
    """The sglang modules the hook modules import from (at any level: lazy imports count)."""
    found = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang."):
                found.add(node.module)
    return found


def _upstream_names(patch: Patch, files: list[Path]) -> dict[str, tuple[str, str]]:
    """Attribute name -> (module, qualname) of its definition, for the classes the patch's hooks touch."""
    classes = []  # the most specific first: a name resolves to the owner class's own (overriding) definition
    for target in patch.targets:
        owner = resolve_owner(importlib.import_module(target.module), target.owner_path)
        if inspect.isclass(owner):
            classes.append(owner)
    for name in sorted({t.module for t in patch.targets} | _imported_upstream_modules(files)):
        module = importlib.import_module(name)  # its classes and those it exports (a package's __init__)
        classes += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__.startswith(name)]
    names: dict[str, tuple[str, str]] = {}
    for cls in classes:
        for base in cls.__mro__:
            if not base.__module__.startswith("sglang."):
                continue
            for name in vars(base):
                if not (name.startswith("__") and name.endswith("__")) and name not in _GENERIC:
                    names.setdefault(name, _definition(base, name))
    return names


@functools.lru_cache(maxsize=None)
def _tree(module: str) -> ast.Module:
    return ast.parse(fingerprint.module_source_path(module).read_text(encoding="utf-8"))


def _definition(cls, name: str) -> tuple[str, str]:
    """Where ``cls.name`` is written: its own definition, or the class itself when the name is made by code
    (a property set in a loop, a slot): the whole class is then what the hook relies on."""
    try:
        find_definition(_tree(cls.__module__), f"{cls.__qualname__}.{name}")
    except (TargetNotFound, OSError):
        return cls.__module__, cls.__qualname__
    return cls.__module__, f"{cls.__qualname__}.{name}"


def _used(path: Path, names: dict[str, tuple[str, str]]) -> set[tuple[str, str]]:
    """The upstream definitions ``path`` uses, as ``(module, qualname)``."""
    found: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ACCESSORS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name = node.args[1].value
        if name in names:
            found.add(names[name])
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang."):
            module = importlib.import_module(node.module)
            for alias in node.names:
                obj = getattr(module, alias.name, None)
                if inspect.isfunction(obj) and obj.__module__.startswith("sglang."):
                    found.add((obj.__module__, obj.__qualname__))
    return found
