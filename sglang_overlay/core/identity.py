"""Which sglang this process runs: the file ``import sglang`` resolves to and the install record that owns it.

The overlay's fingerprints and version pin speak of the *installed* sglang (its ``sglang-*.dist-info``); the
process runs whatever ``import sglang`` finds. :func:`identity_problem` refuses where the two can differ: a
``sglang/`` folder earlier on ``sys.path`` (the working directory under ``python -m``/``-c``, ``PYTHONPATH``)
shadows the installed package, another distribution ships a top-level ``sglang`` package (its files replace
upstream's), or two install records for ``sglang`` exist.

Invariants: nothing here imports sglang (a top-level ``find_spec`` executes nothing; an already-imported
sglang is read from ``sys.modules``); install records are read as files, never parsed as metadata. Cost: one
directory listing per ``sys.path`` entry and one file per other distribution (``top_level.txt``, else its
``RECORD``; 83 of 167 here, 3 MB, torch's 1.5 MB the most): 55-110 ms per process measured on a 2-core machine
at load 11 (an upper bound), where ``importlib.metadata.packages_distributions()`` took 1.7 s.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

PACKAGE = "sglang"


@dataclass
class Identity:
    """What ``import sglang`` finds here, and the install records that speak for a ``sglang`` package."""

    imported: Path | None  # sglang/__init__.py as this process imports (or would import) it
    records: list[Path] = field(default_factory=list)  # sglang-*.dist-info / .egg-info on sys.path, in order
    others: list[str] = field(default_factory=list)  # other distributions' records shipping sglang/


def _dist_name(record_dir: str) -> str:
    """``Foo_Bar-1.0.dist-info`` -> ``foo-bar`` (PEP 503 normalized)."""
    return canonicalize_name(record_dir.rsplit(".", 1)[0].split("-", 1)[0])


def _ships_package(record: Path) -> bool:
    """The distribution's record says it installs a top-level ``sglang`` package."""
    try:
        return PACKAGE in (record / "top_level.txt").read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        pass
    try:
        text = (record / "RECORD").read_bytes()
    except OSError:
        return False
    return text.startswith(b"sglang/") or b"\nsglang/" in text


def _imported_file() -> Path | None:
    module = sys.modules.get(PACKAGE)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        try:
            spec = importlib.util.find_spec(PACKAGE)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        origin = spec.origin
        if origin in (None, "namespace"):  # a folder without __init__.py: name the folder
            locations = list(spec.submodule_search_locations or ())
            return Path(locations[0]) if locations else None
    return Path(origin)


def _entries() -> list[Path]:
    seen, out = set(), []
    for entry in sys.path:
        path = Path(entry or os.getcwd())
        try:
            key = path.resolve()
        except OSError:
            continue
        if key not in seen and path.is_dir():
            seen.add(key)
            out.append(path)
    return out


def sglang_identity() -> Identity:
    found = Identity(_imported_file())
    for entry in _entries():
        try:
            names = sorted(e.name for e in os.scandir(entry) if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
        for name in names:
            if _dist_name(name) == PACKAGE:
                found.records.append(entry / name)
            elif name.endswith(".dist-info") and _ships_package(entry / name):
                found.others.append(f"{_dist_name(name)} ({entry / name})")
    return found


def _owned(imported: Path, record: Path) -> bool:
    """``record`` installed the package ``imported`` belongs to: beside it, or (editable) under its source."""
    package_dir = (imported if imported.is_dir() else imported.parent).resolve()
    if package_dir == (record.parent / PACKAGE).resolve():
        return True
    try:
        direct = json.loads((record / "direct_url.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    url = direct.get("url", "") if direct.get("dir_info", {}).get("editable") else ""
    return url.startswith("file://") and package_dir.is_relative_to(Path(url[len("file://") :]).resolve())


def _shadowing_entry(imported: Path) -> str:
    package_dir = (imported if imported.is_dir() else imported.parent).resolve()
    for entry in sys.path:
        if (Path(entry or os.getcwd()).resolve() / PACKAGE) == package_dir:
            cwd = entry in ("", ".") or Path(entry).resolve() == Path.cwd().resolve()
            return f"sys.path entry {entry!r}" + (" (the working directory)" if cwd else "")
    return "an earlier sys.path entry"


def describe(identity: Identity) -> str:
    """One line for ``check``: the imported file and its owner."""
    owner = next((r for r in identity.records if identity.imported and _owned(identity.imported, r)), None)
    return f"{identity.imported or 'not importable'} (installed by {owner.name if owner else 'no install record'})"


def identity_problem(identity: Identity | None = None) -> str | None:
    """Why the sglang this process imports may not be the installed one the overlay verified; None when it is
    (or when no sglang is installed at all: the version rule says that)."""
    identity = identity or sglang_identity()
    if len(identity.records) > 1:
        return (
            f"two install records for sglang: {', '.join(str(r) for r in identity.records)}; the version pip "
            "reports and the files that import need not match. Uninstall until none is left (pip uninstall -y "
            "sglang, repeated), then install the pin once."
        )
    if identity.others:
        return (
            f"another distribution ships the top-level package sglang: {', '.join(identity.others)}; its files "
            "replace or mix with upstream's, so the installed sglang is not what runs. Uninstall it, then "
            "reinstall the pin (pip install --force-reinstall --no-deps sglang==VERSION)."
        )
    if not identity.records or identity.imported is None or _owned(identity.imported, identity.records[0]):
        return None
    return (
        f"import sglang resolves to {identity.imported}, which the installed sglang ({identity.records[0]}) does "
        f"not own: a sglang/ folder on {_shadowing_entry(identity.imported)} shadows the installed package. "
        "Run from another directory, or take that folder off PYTHONPATH."
    )
