"""The patch registry: every patch is declared once, as data, in its own folder.

A patch is a package ``sglang_overlay/patches/<id_with_underscores>/`` whose ``__init__.py`` holds
``PATCH = Patch(...)``, plus one description ``patches/<id>.md``. Code written against one upstream
design lives in a *release folder* of the patch, a sub-package whose ``__init__.py`` holds
``RELEASE = Release(...)``: the range of sglang releases it serves, declared once, and its targets.
The same range selects the folder's tests (``tests/patches/<id_with_underscores>/<folder>/``)::

    # sglang_overlay/patches/my_fix/__init__.py
    PATCH = Patch(
        id="my-fix", title="...", description="my-fix.md", process="scheduler", position=4,
        targets=(Target("sglang.srt.x", "Cls.method", "sglang_overlay.patches.my_fix.hooks:around"),),  # every release
        knobs=(Knob("SGLANG_OVERLAY_MY_FIX_LIMIT", "10", "what it bounds"),),
    )
    # sglang_overlay/patches/my_fix/unified/__init__.py
    RELEASE = Release(">=0.5.23", targets=(Target("sglang.srt.y", "Cls.f", f"{__name__}.gate:around"),))

- ``position`` is the patch's place in the series: explicit, so adding a patch never renumbers the others.
- Hook strings (``"module:function"``) are resolved only when a target is applied, so discovering the
  registry imports neither torch nor upstream. A release folder's hooks live in that folder; the
  patch's own targets' hooks live outside every release folder.
- :func:`discover_patches` takes the upstream version (and, for tests, the package to scan): it reads
  no lock and no environment. :func:`declared_patches` adds what this process names
  (``SGLANG_OVERLAY_EXTRA_PATCHES``), and :func:`declared_overlay` is the overlay this process runs (the lock
  and the environment read): what ranks compare and ``/metrics`` shows.

The declaration classes live in ``core.declarations`` (each validates itself) and are re-exported here.

Invariants checked here: ids are lower-case words joined by ``-`` and match their folder; positions
and ids are unique; the release ranges of one patch do not overlap (refused naming both); no target is
hooked twice in one release, nor by two patches. Cost: one import of each declaration package.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
from dataclasses import replace

from sglang_overlay.core import installed, lockfile, settings
from sglang_overlay.core.declarations import (
    CANNOT_TELL,
    FIXED_UPSTREAM,
    HOOK_TYPES,
    NEEDED,
    PATCHES_PACKAGE,
    PROCESSES,
    Dependency,
    Finding,
    Knob,
    Patch,
    Release,
    Target,
    package_name,
)
from sglang_overlay.errors import RegistryError
from sglang_overlay.version import __version__

__all__ = [
    "ANY_UPSTREAM",
    "CANNOT_TELL",
    "FIXED_UPSTREAM",
    "NEEDED",
    "Finding",
    "HOOK_TYPES",
    "PROCESSES",
    "Dependency",
    "Knob",
    "Patch",
    "RegistryError",
    "Release",
    "Target",
    "discover_patches",
    "package_name",
]


def releases_of(package) -> tuple[Release, ...]:
    """The release folders of a patch package: each sub-package declaring ``RELEASE = Release(...)``."""
    found = []
    for info in sorted(pkgutil.iter_modules(getattr(package, "__path__", [])), key=lambda m: m.name):
        if not info.ispkg or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        release = getattr(module, "RELEASE", None)
        if release is None:
            continue
        if not isinstance(release, Release):
            raise RegistryError(f"{module.__name__}.RELEASE is not a Release(...)")
        release = replace(release, folder=info.name)
        prefix = f"{module.__name__}."
        for target in release.targets:
            if not target.hook_module.startswith(prefix):
                raise RegistryError(
                    f"release folder {module.__name__}: hook {target.hook} of {target.path} lives "
                    "outside the folder (a release's code lives in its folder)"
                )
        found.append(release)
    return tuple(found)


def _load_declaration(module_name: str, extra: bool) -> Patch:
    module = importlib.import_module(module_name)
    patch = getattr(module, "PATCH", None)
    if not isinstance(patch, Patch):
        raise RegistryError(f"{module_name} has no PATCH = Patch(...) declaration")
    if not extra and module_name.rsplit(".", 1)[-1] != package_name(patch.id):
        raise RegistryError(f"{module_name} declares patch {patch.id!r}: its folder must be {package_name(patch.id)}")
    if not extra and patch.position < 1:
        raise RegistryError(f"patch {patch.id}: a patch of the series declares its position (>= 1)")
    releases = releases_of(module)
    folders = {f"{module.__name__}.{r.folder}." for r in releases}
    for target in patch.targets:
        if any(target.hook_module.startswith(f) for f in folders):
            raise RegistryError(
                f"patch {patch.id}: target {target.path} of every release has its hook {target.hook} "
                "in a release folder; declare it in that folder's RELEASE"
            )
    if not releases and not patch.targets:
        raise RegistryError(f"patch {patch.id}: declares no targets and has no release folder")
    return replace(patch, releases=releases, extra=extra, declared_in=module_name)


ANY_UPSTREAM = "*"  # discover_patches(ANY_UPSTREAM): every patch with all its release folders


def discover_patches(upstream: str, package: str = PATCHES_PACKAGE, extra: tuple[str, ...] = ()) -> list[Patch]:
    """Every declared patch of ``package`` in series order, then the ``extra`` declaration modules.

    For upstream release ``upstream`` each patch is flat (:meth:`Patch.for_upstream`: its own targets and
    its release folder's); a patch with none is not part of that release's series. ``ANY_UPSTREAM`` keeps
    each patch whole, with its release folders. Reads no lock and no environment.
    """
    series_pkg = importlib.import_module(package)
    names = sorted(m.name for m in pkgutil.iter_modules(series_pkg.__path__) if m.ispkg and not m.name.startswith("_"))
    series = sorted(
        (_load_declaration(f"{series_pkg.__name__}.{n}", extra=False) for n in names), key=lambda p: p.position
    )
    found = series + [_load_declaration(n, extra=True) for n in extra]
    _check_unique(series, found)
    if upstream == ANY_UPSTREAM:
        return found
    return [q for q in (p.for_upstream(upstream) for p in found) if q is not None]


def _check_unique(series: list[Patch], found: list[Patch]) -> None:
    positions = [p.position for p in series]
    if len(set(positions)) != len(positions):
        clash = sorted({(p.position, p.id) for p in series if positions.count(p.position) > 1})
        raise RegistryError(f"two patches share a series position: {clash}")
    seen: dict[str, str] = {}
    for patch in found:
        if patch.id in seen:
            raise RegistryError(f"patch id {patch.id!r} declared twice")
        seen[patch.id] = patch.title
    owner: dict[str, str] = {}
    for patch in found:
        for path in {t.path for t in patch.all_targets}:
            if path in owner:
                raise RegistryError(f"target {path} is hooked by two patches: {owner[path]} and {patch.id}")
            owner[path] = patch.id


def declared_patches(version: str) -> list[Patch]:
    """The series for upstream ``version`` plus the extra declaration modules this process names
    (``SGLANG_OVERLAY_EXTRA_PATCHES``): what start-up applies and ``check`` reports."""
    return discover_patches(version, extra=tuple(settings.extra_patch_modules()))


def declared_overlay(skipped: tuple[str, ...] = ()) -> dict:
    """The overlay this process runs, as ranks compare it and ``/metrics`` shows it: overlay version, installed
    sglang, pin, lock digest, enabled patches (less those ``skipped`` here, non-strict), strictness."""
    path = lockfile.lock_path()
    pin = lockfile.read_pin(path)
    disabled = set(settings.disabled_patch_ids()) | set(skipped)
    patches = declared_patches(pin.version)
    return {
        "overlay": __version__,
        "sglang": installed.installed_sglang_version(),
        "pin": pin.version,
        "lock": "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16],
        "patches": sorted(p.id for p in patches if p.id not in disabled),
        "strict": settings.strict(),
    }
