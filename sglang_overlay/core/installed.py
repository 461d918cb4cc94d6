"""The installed upstream, and whether it fits: every answer to "is this the sglang the overlay was locked against?"

- :func:`installed_sglang_version`: which sglang this environment holds, asked of its metadata;
- :func:`version_problem`: it is another release than the pin (refused, naming every supported pin);
- :func:`identity_problem`: the process would not run the installed sglang. The fingerprints and the pin speak of
  the *installed* sglang (its ``sglang-*.dist-info``); the process runs whatever ``import sglang`` finds. Refused
  where the two can differ: a ``sglang/`` folder earlier on ``sys.path`` (the working directory under
  ``python -m``/``-c``, ``PYTHONPATH``) shadows the installed package, another distribution ships a top-level
  ``sglang`` package (its files replace upstream's), or two install records for ``sglang`` exist;
- :func:`import_problem`: it does not import as far as the overlay needs (``check`` and ``launch`` only).
``core.readiness`` turns each into its rule; the lock of the installed release is chosen in ``core.lockfile``.

Invariants: nothing here imports sglang except :func:`import_problem` (a top-level ``find_spec`` executes
nothing; an already-imported sglang is read from ``sys.modules``); install records are read as files, never
parsed as metadata. Cost: one metadata lookup for the version; for the identity one directory listing per
``sys.path`` entry and one file per other distribution (``top_level.txt``, else its ``RECORD``; 83 of 167 here,
3 MB, torch's 1.5 MB the most): 55-110 ms per process measured on a 2-core machine at load 11 (an upper bound),
where ``importlib.metadata.packages_distributions()`` took 1.7 s; ``import_problem`` costs ``import sglang``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sglang_overlay.core import settings
from sglang_overlay.version import __version__


def installed_sglang_version() -> str | None:
    """The installed sglang's version, or None where no sglang distribution is installed."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def running_python() -> str:
    """This interpreter's ``major.minor``: the key of a pin's wheel in the lock."""
    return "%d.%d" % sys.version_info[:2]


HOOK_REGISTRY = "sglang.srt.plugins.hook_registry"  # what the overlay hooks through: SGLang's own registry


def import_problem() -> str | None:
    """None when the installed sglang imports as far as the overlay needs (its HookRegistry); else why not,
    in one line. Costs what ``import sglang`` costs (seconds): for ``check`` and ``launch``, never start-up."""
    version = installed_sglang_version()
    try:
        importlib.import_module(HOOK_REGISTRY)
    except Exception as exc:  # any failure of a broken install: a missing dependency, a wrong Python, ...
        return (
            f"sglang {version} is installed but does not import ({HOOK_REGISTRY}: {type(exc).__name__}: {exc}); "
            "install its dependencies (pip install sglang==VERSION without --no-deps)"
        )
    return None


def version_problem(pinned: str, supported: list[str]) -> str | None:
    """None when the installed sglang is release ``pinned`` (or the user opted out); ``supported``: every pin."""
    pins = ", ".join(f"sglang=={v}" for v in supported)
    found = installed_sglang_version()
    if found is None:
        return (
            f"sglang-overlay {__version__} found no sglang installed in this environment "
            f"({sys.prefix}); supported pins: {pins}. Install one first (pip install sglang==VERSION)."
        )
    try:
        same = Version(found) == Version(pinned)
    except InvalidVersion:
        same = False
    if same or settings.allow_unpinned():
        return None
    return (
        f"sglang-overlay {__version__} does not support the installed sglang {found}: its lock pins "
        f"sglang=={pinned} (supported pins: {pins}). Install a supported sglang (pip install sglang==VERSION), "
        f"or set {settings.ALLOW_UNPINNED}=1 to run on another version (per-target fingerprints are still enforced)."
    )


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
