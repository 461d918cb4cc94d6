"""The declarations a patch is made of, as data: ``Patch``, ``Release``, ``Target``, ``Dependency``, ``Knob``.

Each validates itself when built (ids, hook strings, hook types, knob names, upstream ranges: a bad one is a
``RegistryError`` naming it); ``Patch.for_upstream`` flattens a patch for one release (its own targets and its
release folder's). ``core.registry`` finds the declarations and checks them against each other.

Invariant: building a declaration imports neither torch nor upstream (hook strings resolve when applied).
Cost: none beyond building the dataclasses.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field, replace

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from sglang_overlay.core import settings
from sglang_overlay.errors import RegistryError

HOOK_TYPES = ("BEFORE", "AFTER", "AROUND", "REPLACE")
PROCESSES = ("scheduler", "http", "any")  # a patch's process kind (a process's own place: its "role")
PATCHES_PACKAGE = "sglang_overlay.patches"
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_KNOB = re.compile(r"^SGLANG_OVERLAY_[A-Z0-9_]+$")


def _specifier(text: str, where: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise RegistryError(f"{where}: upstream {text!r} is not a version specifier") from exc


@dataclass(frozen=True)
class Target:
    """One upstream object a patch hooks."""

    module: str  # upstream module, e.g. "sglang.srt.mem_cache.unified_radix_cache"
    qualname: str  # object inside it, e.g. "UnifiedRadixCache._load_back_transfers"
    hook: str  # "package.module:function" resolved at application time
    hook_type: str = "AROUND"  # a sglang HookType name

    def __post_init__(self) -> None:
        if self.hook_type not in HOOK_TYPES:
            raise RegistryError(f"{self.path}: hook_type {self.hook_type!r} not in {HOOK_TYPES}")
        if ":" not in self.hook:
            raise RegistryError(f"{self.path}: hook {self.hook!r} must be 'module:function'")

    @property
    def path(self) -> str:
        """The dotted target string SGLang's HookRegistry takes."""
        return f"{self.module}.{self.qualname}"

    @property
    def owner_path(self) -> tuple[str, ...]:
        """Attribute path from the module to the object holding the hooked attribute."""
        return tuple(self.qualname.split(".")[:-1])

    @property
    def attribute(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def hook_module(self) -> str:
        return self.hook.partition(":")[0]

    def resolve_hook(self):
        return resolve(self.hook)


def resolve(spec: str):
    """``"package.module:function"`` -> the object (imports the module)."""
    module_name, _, func_name = spec.partition(":")
    obj = importlib.import_module(module_name)
    for part in func_name.split("."):
        obj = getattr(obj, part)
    return obj


NEEDED, FIXED_UPSTREAM, CANNOT_TELL = "needed", "fixed upstream", "cannot tell"


@dataclass(frozen=True)
class Finding:
    """What a patch's probe found upstream doing, on the installed release, without the overlay.

    ``verdict``: ``NEEDED`` (upstream still has the bug), ``FIXED_UPSTREAM`` (the description's "When it can
    be dropped" has come) or ``CANNOT_TELL`` (why, in ``evidence``). ``evidence``: one line, what upstream did.
    """

    verdict: str
    evidence: str

    def __post_init__(self) -> None:
        if self.verdict not in (NEEDED, FIXED_UPSTREAM, CANNOT_TELL):
            raise RegistryError(f"finding verdict {self.verdict!r} not in {(NEEDED, FIXED_UPSTREAM, CANNOT_TELL)}")
        if not self.evidence.strip() or "\n" in self.evidence:
            raise RegistryError(f"finding evidence must be one non-empty line, not {self.evidence!r}")


def _probe_spec(probe: str | None, where: str) -> None:
    if probe is not None and ":" not in probe:
        raise RegistryError(f"{where}: probe {probe!r} must be 'module:function' (returning a Finding)")


@dataclass(frozen=True)
class Dependency:
    """An upstream definition a patch's hooks call, override or read without hooking it.

    Fingerprinted and locked like a target (the lock's ``dependencies``), so a change to it refuses start-up
    naming it and ``needed_by``, the hook module(s) that rely on it, instead of breaking inside the
    scheduler. ``tests/core/test_dependencies.py`` finds the names mechanically, so this list cannot go stale.
    """

    module: str  # where the definition lives, e.g. "sglang.srt.mem_cache.unified_radix_cache"
    qualname: str  # e.g. "UnifiedRadixCache._evict_device_leaf"
    needed_by: str  # the hook module(s) relying on it, relative to the patch's package: "unified.eviction"

    @property
    def path(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclass(frozen=True)
class Release:
    """The code of one upstream design: a folder of its patch and the sglang releases it serves.

    ``upstream`` is a ``packaging`` specifier (``">=0.5.23"``), declared here once: it selects the
    folder's targets for a release and the folder's tests alike. ``folder`` is filled in by discovery.
    """

    upstream: str
    targets: tuple[Target, ...]
    folder: str = ""
    probe: str | None = None  # "module:function" -> Finding: this design's upstream bug, on the installed release

    def __post_init__(self) -> None:
        _probe_spec(self.probe, f"release {self.folder or '?'}")
        spec = _specifier(self.upstream, f"release {self.folder or '?'}")
        if not str(spec):
            raise RegistryError(f"release {self.folder or '?'}: declares no upstream range (use the patch's targets)")
        if not self.targets:
            raise RegistryError(f"release {self.folder or '?'} ({self.upstream}): declares no targets")

    @property
    def specifier(self) -> SpecifierSet:
        return SpecifierSet(self.upstream)

    def applies_to(self, version: str) -> bool:
        return self.specifier.contains(version, prereleases=True)


@dataclass(frozen=True)
class Knob:
    """An environment variable a patch reads: a ``flag`` (1/0, ...) or a ``number``.

    Declared on the patch, so start-up validates it before anything is hooked (a malformed
    value refuses start-up naming the variable) and the README's generated table lists it.
    """

    name: str
    default: str
    meaning: str
    kind: str = "flag"  # flag | number
    minimum: float | None = None  # numbers only

    def __post_init__(self) -> None:
        if not _KNOB.match(self.name):
            raise RegistryError(f"knob {self.name!r} must be SGLANG_OVERLAY_ + upper-case words")
        if self.kind not in ("flag", "number"):
            raise RegistryError(f"knob {self.name}: kind {self.kind!r} not in ('flag', 'number')")
        self.read()  # the default itself must parse

    def read(self, environ: dict | None = None):
        """The value in this process (``environ`` overrides ``os.environ``, for tests); ValueError when malformed."""
        if self.kind == "flag":
            return settings.flag(self.name, settings.parse_flag(self.name, self.default), environ)
        return settings.number(self.name, float(self.default), minimum=self.minimum, environ=environ)


@dataclass(frozen=True)
class Patch:
    """A patch of the series: id, series position, title, description file, process kind, targets.

    ``targets`` are hooked on every release; ``releases`` (filled by discovery from the release folders)
    add each design's own. :meth:`for_upstream` flattens both for one release.
    """

    id: str
    title: str
    description: str  # file name under patches/, e.g. "cp-hicache-owner-lanes.md"
    process: str  # the kind of SGLang process whose imports reach the targets: scheduler | http | any
    targets: tuple[Target, ...] = ()
    position: int = 0  # place in the series, >= 1; 0 only for extras
    knobs: tuple[Knob, ...] = ()
    releases: tuple[Release, ...] = ()
    extra: bool = field(default=False, compare=False)  # declared outside the shipped series
    probe: str | None = None  # "module:function" -> Finding (a release folder's own probe takes precedence)
    status_view: str | None = None  # "module:function": what ``status`` shows of the patch's own records
    declared_in: str = field(default="", compare=False)  # the module holding ``PATCH`` (filled by discovery)

    def __post_init__(self) -> None:
        _probe_spec(self.probe, f"patch {self.id}")
        if self.status_view is not None and ":" not in self.status_view:
            raise RegistryError(f"patch {self.id}: status_view {self.status_view!r} must be 'module:function'")
        if not _ID.match(self.id):
            raise RegistryError(f"patch id {self.id!r} must be lower-case words joined by '-'")
        if not isinstance(self.position, int) or isinstance(self.position, bool) or self.position < 0:
            raise RegistryError(f"patch {self.id}: position {self.position!r} must be a whole number >= 1")
        if self.process not in PROCESSES:
            raise RegistryError(f"patch {self.id}: process {self.process!r} not in {PROCESSES}")
        for release in self.releases:
            paths = [t.path for t in (*self.targets, *release.targets)]
            if len(set(paths)) != len(paths):
                raise RegistryError(
                    f"patch {self.id}: a target is declared twice for release {release.folder} ({release.upstream})"
                )
        own = [t.path for t in self.targets]
        if len(set(own)) != len(own):
            raise RegistryError(f"patch {self.id}: a target is declared twice")
        for i, a in enumerate(self.releases):
            for b in self.releases[i + 1 :]:
                witness = overlap(a.specifier, b.specifier)
                if witness is not None:
                    raise RegistryError(
                        f"patch {self.id}: release folders {a.folder!r} ({a.upstream}) and {b.folder!r} "
                        f"({b.upstream}) both claim sglang {witness}: a release is served by one folder"
                    )

    @property
    def all_targets(self) -> tuple[Target, ...]:
        """Every target of every release (the registry's own checks, rebase reports)."""
        return (*self.targets, *(t for r in self.releases for t in r.targets))

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.module for t in self.targets))

    @property
    def package(self) -> str:
        """The folder (package) that owns this patch: ``sglang_overlay.patches.<id_with_underscores>``; an extra
        patch's own declaration module (``SGLANG_OVERLAY_EXTRA_PATCHES``)."""
        return self.declared_in if self.extra and self.declared_in else f"{PATCHES_PACKAGE}.{package_name(self.id)}"

    def release_for(self, version: str) -> Release | None:
        """The release folder that serves upstream ``version`` (None: only the patch's own targets apply)."""
        return next((r for r in self.releases if r.applies_to(version)), None)

    def for_upstream(self, version: str) -> "Patch | None":
        """This patch as upstream ``version`` sees it: its own targets plus those of the release folder
        serving ``version``, flat; None when no target applies (the patch is not in that release's series)."""
        release = self.release_for(version)
        targets = (*self.targets, *(release.targets if release else ()))
        if not targets:
            return None
        probe = (release.probe if release else None) or self.probe
        return replace(self, targets=targets, releases=(), probe=probe)


def overlap(a: SpecifierSet, b: SpecifierSet) -> str | None:
    """A version both ranges contain, or None. Two ranges of versions that share a version share one at
    or next to a boundary either names (or the lowest version, for two upper bounds): those are searched."""
    candidates = {"0", "999999"}
    for spec in (*a, *b):
        base = Version(spec.version.rstrip(".*"))
        candidates |= {
            str(base),
            f"{base.base_version}.dev0",
            f"{base.base_version}.post1",
            f"{base.base_version}.9999",
        }
    for version in sorted(candidates, key=Version):
        if a.contains(version, prereleases=True) and b.contains(version, prereleases=True):
            return version
    return None


def package_name(patch_id: str) -> str:
    """The folder name of a patch id: ``cp-hicache-owner-lanes`` -> ``cp_hicache_owner_lanes``."""
    return patch_id.replace("-", "_")
