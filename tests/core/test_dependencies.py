"""Every upstream definition a hook relies on is declared and locked: found mechanically, in-process.

For each patch of the installed release, the hook modules it runs here (the patch's root and the release folder
serving this release, less its ``check --needed`` probes) are parsed. An upstream name they use is one of:
- an attribute (``x.name``, or ``getattr/setattr/hasattr(x, "name")``) whose name is defined by an upstream class
  the hooks touch: the targets' owner classes, the classes of the targets' modules and of the upstream modules
  the hooks import from, with their sglang bases;
- a function imported from sglang (``from sglang.srt.x import f``).
Each must be a target or a declared ``Dependency`` of the patch (so locked, and refused at start-up when it
changes). A new call to an undeclared upstream name fails here, naming the declaration to add: the list
cannot go stale. Not covered: instance attributes set only in ``__init__`` (no definition of their own) and
names every container has (``clear``, ``get``, ...: a set's ``clear`` is not the allocator's).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from pathlib import Path

import pytest

from sglang_overlay.core import fingerprint, installed, lockfile
from sglang_overlay.core.introspection import TargetNotFound, find_definition, resolve_owner
from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches

VERSION = installed.installed_sglang_version() or "0"
PATCHES = discover_patches(VERSION)
WHOLE = {p.id: p for p in discover_patches(ANY_UPSTREAM)}
_ACCESSORS = {"getattr", "setattr", "hasattr", "delattr"}
# names every container has: ``x.clear()`` on a set is not the allocator's ``clear`` (not covered, by design)
_GENERIC = set(dir(dict)) | set(dir(list)) | set(dir(set)) | set(dir(str)) | set(dir(tuple))


def _hook_files(patch) -> list[Path]:
    """The patch's modules that run on this release: its root and the folder serving it (not other folders)."""
    root = Path(importlib.import_module(patch.package).__file__).parent
    whole = WHOLE[patch.id]
    serving = whole.release_for(VERSION)
    other = {r.folder for r in whole.releases} - ({serving.folder} if serving else set())
    files = root.rglob("*.py")
    # a probe (probe.py, ``check --needed``) runs upstream's code outside servers: a name it uses that moves
    # makes it "cannot tell" with the reason, never a server running unlocked code, so it is not scanned
    return sorted(f for f in files if f.name != "probe.py" and not (set(f.relative_to(root).parts[:-1]) & other))


def _imported_upstream_modules(patch) -> set[str]:
    """The sglang modules the patch's hook modules import from (at any level: lazy imports count)."""
    found = set()
    for path in _hook_files(patch):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang."):
                found.add(node.module)
    return found


@functools.lru_cache(maxsize=None)
def _upstream_names_of(patch_id: str) -> dict[str, tuple[str, str]]:
    return _upstream_names(next(p for p in PATCHES if p.id == patch_id))


def _upstream_names(patch) -> dict[str, tuple[str, str]]:
    """Attribute name -> (module, qualname) of its definition, for the classes the patch's hooks touch."""
    classes = []  # the most specific first: a name resolves to the owner class's own (overriding) definition
    for target in patch.targets:
        owner = resolve_owner(importlib.import_module(target.module), target.owner_path)
        if inspect.isclass(owner):
            classes.append(owner)
    for name in sorted({t.module for t in patch.targets} | _imported_upstream_modules(patch)):
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


def _used(path: Path, names: dict) -> dict[str, set[str]]:
    """Upstream definitions ``path`` uses: qualified path -> the lines' evidence."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
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
            module, qualname = names[name]
            found.setdefault(f"{module}.{qualname}", set()).add(f"{path.stem}:{node.lineno}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang."):
            module = importlib.import_module(node.module)
            for alias in node.names:
                obj = getattr(module, alias.name, None)
                if inspect.isfunction(obj) and obj.__module__.startswith("sglang."):
                    found.setdefault(f"{obj.__module__}.{obj.__qualname__}", set()).add(f"{path.stem}:{node.lineno}")
    return found


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.id)
def test_every_upstream_name_a_hook_uses_is_a_target_or_a_declared_dependency(patch):
    names = _upstream_names_of(patch.id)
    used: dict[str, set[str]] = {}
    for path in _hook_files(patch):
        for qualified, where in _used(path, names).items():
            used.setdefault(qualified, set()).update(where)
    declared = {t.path for t in patch.targets} | {d.path for d in patch.depends}
    missing = {q: sorted(w) for q, w in used.items() if q not in declared}
    assert not missing, (
        f"patch {patch.id} on sglang {VERSION}: upstream definitions its hooks use, neither hooked "
        f"nor declared as a Dependency (module, qualname, needed_by): {missing}"
    )


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.id)
def test_every_declared_dependency_is_used_and_locked(patch):
    """No dead declaration (it would lock, and refuse start-up over, code no hook touches)."""
    names = _upstream_names_of(patch.id)
    used = set()
    for path in _hook_files(patch):
        used |= set(_used(path, names))
    lock = lockfile.read_lock()
    for dep in patch.depends:
        assert dep.path in used, f"{patch.id}: {dep.path} is declared but no hook module here uses it"
        entry = lock.get("dependencies", {}).get(dep.path)
        assert entry and patch.id in entry["patch"].split(","), f"{dep.path} is not in the lock: sglang-overlay lock"
