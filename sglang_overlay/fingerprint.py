"""Fingerprints of upstream targets, read from source without importing it.

A fingerprint is ``sha256:`` + the sha256 of the target's normalized source:
the class or function definition found by qualified name in the module's AST,
re-rendered by ``ast.unparse`` (so comments and formatting do not count, code,
docstrings and decorators do). Reading the source statically lets start-up
verify every target before its module is imported (lazy application) and lets
``rebase-check`` compare another wheel without installing it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
from pathlib import Path


class TargetNotFound(LookupError):
    """The module or the qualified name inside it does not exist."""


def _find_definition(tree: ast.Module, qualname: str) -> ast.AST:
    scope: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = None
        for stmt in scope:
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == part:
                node = stmt  # the last definition wins, as at run time
        if node is None:
            raise TargetNotFound(f"{qualname!r}: no definition of {part!r}")
        scope = node.body
    assert node is not None
    return node


def fingerprint_source(source: str, qualname: str) -> str:
    """Fingerprint of ``qualname`` inside a module's source text."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TargetNotFound(f"module source does not parse: {exc}") from exc
    node = _find_definition(tree, qualname)
    normalized = ast.unparse(node)
    return "sha256:" + hashlib.sha256(normalized.encode()).hexdigest()


def module_source_path(module: str) -> Path:
    """Where ``module``'s source lives, found without executing it.

    ``find_spec`` imports the parent packages (cheap ``__init__`` modules), never
    the module itself.
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise TargetNotFound(f"module {module!r} cannot be located: {exc}") from exc
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise TargetNotFound(f"module {module!r} not found (or has no Python source)")
    return Path(spec.origin)



@functools.lru_cache(maxsize=None)
def installed_file_digest(module: str) -> str | None:
    """``sha256:`` of the installed module file's bytes (None when it cannot be located)."""
    try:
        data = module_source_path(module).read_bytes()
    except (TargetNotFound, OSError):
        return None
    return "sha256:" + hashlib.sha256(data).hexdigest()


def fingerprint_installed(module: str, qualname: str) -> str:
    """Fingerprint of a target in the installed upstream."""
    path = module_source_path(module)
    return fingerprint_source(path.read_text(encoding="utf-8"), qualname)


def module_file_in_wheel(module: str) -> str:
    """The member name of ``module``'s source inside a wheel (a zip)."""
    return module.replace(".", "/") + ".py"
