"""Small helpers every part of the core shares: finding definitions and attributes.

Two views of one target ``module.Qual.name``:

- statically, in source text (``find_definition``): the AST node of a qualified
  name, the last definition winning as at run time (or a class- or module-level
  assignment, for a dependency on a field). Used by fingerprints; never imports the module.
- at run time, on an imported module (``resolve_owner`` / ``raw_attribute``):
  the object holding the attribute and the attribute as stored, so a
  ``classmethod``/``staticmethod`` wrapper is kept and can be restored as it was.

``sha256_tag`` writes every digest the overlay records (``sha256:<hex>``); ``chain_holds`` tells whether a
wrapper chain holds a hook and reaches the original object (the proof that a hook took).
Cost: pure functions, no imports beyond the standard library.
"""

from __future__ import annotations

import ast
import hashlib
import sys


class TargetNotFound(LookupError):
    """The module or the qualified name inside it does not exist."""


def sha256_tag(data: bytes | str) -> str:
    """``sha256:<hex>`` of ``data`` (text is encoded as UTF-8): the one digest format of the overlay."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _assigns(stmt: ast.stmt, name: str) -> bool:
    """``name = ...`` or ``name: T [= ...]`` at this level (a class constant, a NamedTuple or dataclass field)."""
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    return isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)


def find_definition(tree: ast.Module, qualname: str) -> ast.AST:
    """The definition of ``qualname`` in ``tree`` (the last one wins, as at run time): a class or a function,
    or, for the last part, the assignment of a class-level or module-level name (a dependency on a field)."""
    scope: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    parts = qualname.split(".")
    for i, part in enumerate(parts):
        node = None
        for stmt in scope:
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == part:
                node = stmt
            elif i == len(parts) - 1 and _assigns(stmt, part):
                node = stmt
        if node is None:
            raise TargetNotFound(f"{qualname!r}: no definition of {part!r}")
        scope = getattr(node, "body", [])
    assert node is not None
    return node


def resolve_owner(module, owner_path: tuple[str, ...]):
    """The object holding a target's attribute: ``module`` (or its name in ``sys.modules``) walked along ``owner_path``."""
    obj = sys.modules[module] if isinstance(module, str) else module
    for part in owner_path:
        obj = getattr(obj, part)
    return obj


def raw_attribute(owner, attr: str):
    """The attribute as stored (classmethod/staticmethod objects kept); for a class, looked up along its MRO."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attr in klass.__dict__:
                return klass.__dict__[attr]
    return getattr(owner, attr)


def unwrap_descriptor(obj):
    """The function inside a classmethod/staticmethod, else ``obj`` itself."""
    return obj.__func__ if isinstance(obj, (classmethod, staticmethod)) else obj


def chain_holds(current, hook, original) -> bool:
    """True when the wrapper chain starting at ``current`` holds ``hook`` and reaches ``original``."""
    fn = unwrap_descriptor(current)
    saw_hook = False
    seen = 0
    while fn is not None and seen < 64:
        if fn is original:
            return saw_hook
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                if cell.cell_contents is hook:
                    saw_hook = True
            except ValueError:  # empty cell
                pass
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return False
