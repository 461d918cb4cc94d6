"""Fingerprints of upstream targets, read from source without importing it.

A fingerprint is ``sha256:`` + the sha256 of the target's normalized source:
the class or function definition found by qualified name in the module's AST,
re-rendered by ``ast.unparse`` (so comments and formatting do not count, code,
docstrings and decorators do). Reading the source statically lets start-up
verify every target before its module is imported (lazy application) and lets
``rebase-check`` compare another wheel without installing it.

Invariants: a fingerprint depends on the definition's code, docstrings and decorators only;
the same source gives the same fingerprint on every machine. Cost: one parse per fingerprinted
module (start-up avoids even that through the lock's seal); file digests are cached per process.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

from sglang_overlay.core.introspection import TargetNotFound, find_definition, sha256_tag

__all__ = [
    "TargetNotFound",
    "fingerprint_source",
    "fingerprint_installed",
    "installed_file_digest",
    "module_source_path",
    "module_file_in_wheel",
]


def fingerprint_source(source: str, qualname: str) -> str:
    """Fingerprint of ``qualname`` inside a module's source text."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TargetNotFound(f"module source does not parse: {exc}") from exc
    return sha256_tag(ast.unparse(find_definition(tree, qualname)))


def module_source_path(module: str) -> Path:
    """Where ``module``'s source lives, found without executing it or its parents.

    ``find_spec`` of a dotted name imports the parent packages (``import sglang`` alone costs seconds, and a
    package such as ``sglang.srt.layers.moe`` imports half the model stack), so the file is looked up under
    the top-level package's directories first (a top-level ``find_spec`` imports nothing, or returns the
    imported module's spec); ``find_spec`` of the full name is the fallback for layouts that lookup does not
    cover.
    """
    top, _, rest = module.partition(".")
    if rest:  # also where sglang is imported already: finding a dependency must not import its package
        found = _file_under_top_level(top, rest.split("."))
        if found is not None:
            return found
    try:
        spec = importlib.util.find_spec(module)
    except Exception as exc:  # finding a dotted name imports its parents; a broken install fails there, any way
        raise TargetNotFound(f"module {module!r} cannot be located (importing its package fails: {exc!r})") from exc
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise TargetNotFound(f"module {module!r} not found (or has no Python source)")
    return Path(spec.origin)


def _file_under_top_level(top: str, parts: list[str]) -> Path | None:
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    for base in (spec.submodule_search_locations or []) if spec else []:
        stem = Path(base, *parts)
        for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


@functools.lru_cache(maxsize=None)
def installed_file_digest(module: str) -> str | None:
    """``sha256:`` of the installed module file's bytes (None when it cannot be located)."""
    try:
        data = module_source_path(module).read_bytes()
    except (TargetNotFound, OSError):
        return None
    return sha256_tag(data)


def fingerprint_installed(module: str, qualname: str) -> str:
    """Fingerprint of a target in the installed upstream."""
    path = module_source_path(module)
    return fingerprint_source(path.read_text(encoding="utf-8"), qualname)


def module_file_in_wheel(module: str, names: set[str] | frozenset[str] = frozenset()) -> str:
    """The member name of ``module``'s source inside a wheel (a zip): ``a/b.py``, or ``a/b/__init__.py`` for a
    package when ``names`` (the wheel's members) holds that and not the former."""
    member = module.replace(".", "/") + ".py"
    package = module.replace(".", "/") + "/__init__.py"
    return package if member not in names and package in names else member
