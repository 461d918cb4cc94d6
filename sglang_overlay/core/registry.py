"""The patch registry: every patch is declared once, as data, in its own folder.

A patch is a package ``sglang_overlay/patches/<id_with_underscores>/`` whose
``__init__.py`` holds ``PATCH = Patch(...)``, plus one description
``patches/<id>.md``. Everything else about the patch (its hooks, its settings,
per-upstream-version implementations) lives in that folder; the core knows a
patch only through this declaration::

    PATCH = Patch(
        id="my-fix", title="...", description="my-fix.md", role="scheduler", position=4,
        targets=(Target("sglang.srt.x", "Cls.method", "sglang_overlay.patches.my_fix.hooks:around", "AROUND"),),
        knobs=(Knob("SGLANG_OVERLAY_MY_FIX_LIMIT", "10", "what it bounds"),),
    )

- ``position`` is the patch's place in the series (``patches/NNNN-<id>.patch``):
  explicit, so adding a patch never renumbers the others.
- A ``Target`` with ``upstream=">=0.5.23"`` (a ``packaging`` specifier) applies to
  those upstream releases only: per-version implementations of one patch are
  targets whose hooks name different modules of the folder.
- Hook strings (``"module:function"``) are resolved only when a target is applied,
  so discovering the registry imports neither torch nor upstream.

Invariants checked here: ids are lower-case words joined by ``-`` and match their
folder; positions and ids are unique; no target is hooked by two patches.
Cost: one import of each declaration package (cheap by the rule above).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass, field, replace

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from sglang_overlay.core import settings
from sglang_overlay.errors import RegistryError

HOOK_TYPES = ("BEFORE", "AFTER", "AROUND", "REPLACE")
ROLES = ("scheduler", "http", "any")
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_KNOB = re.compile(r"^SGLANG_OVERLAY_[A-Z0-9_]+$")

__all__ = ["ANY_UPSTREAM", "HOOK_TYPES", "ROLES", "Knob", "Patch", "RegistryError", "Target", "discover_patches", "package_name"]


@dataclass(frozen=True)
class Target:
    """One upstream object a patch hooks."""

    module: str  # upstream module, e.g. "sglang.srt.mem_cache.hiradix_cache"
    qualname: str  # object inside it, e.g. "HiRadixCache.load_back"
    hook: str  # "package.module:function" resolved at application time
    hook_type: str = "AROUND"  # a sglang HookType name
    upstream: str = ""  # packaging specifier of the upstream releases it applies to ("" = every release)

    def __post_init__(self) -> None:
        if self.hook_type not in HOOK_TYPES:
            raise RegistryError(f"{self.path}: hook_type {self.hook_type!r} not in {HOOK_TYPES}")
        if ":" not in self.hook:
            raise RegistryError(f"{self.path}: hook {self.hook!r} must be 'module:function'")
        try:
            SpecifierSet(self.upstream)
        except InvalidSpecifier as exc:
            raise RegistryError(f"{self.path}: upstream {self.upstream!r} is not a version specifier") from exc

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

    def applies_to(self, version: str | None) -> bool:
        return not self.upstream or version is None or SpecifierSet(self.upstream).contains(version, prereleases=True)

    def resolve_hook(self):
        module_name, _, func_name = self.hook.partition(":")
        obj = importlib.import_module(module_name)
        for part in func_name.split("."):
            obj = getattr(obj, part)
        return obj


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
    """A patch of the series: id, series position, title, description file, process role, targets."""

    id: str
    title: str
    description: str  # file name under patches/, e.g. "cp-hicache-owner-lanes.md"
    role: str  # the SGLang process whose imports reach the targets: scheduler | http | any
    targets: tuple[Target, ...]
    position: int = 0  # place in the series (patches/NNNN-<id>.patch), >= 1; 0 only for extras
    knobs: tuple[Knob, ...] = ()
    extra: bool = field(default=False, compare=False)  # declared outside the shipped series

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise RegistryError(f"patch id {self.id!r} must be lower-case words joined by '-'")
        if not isinstance(self.position, int) or isinstance(self.position, bool) or self.position < 0:
            raise RegistryError(f"patch {self.id}: position {self.position!r} must be a whole number >= 1")
        if self.role not in ROLES:
            raise RegistryError(f"patch {self.id}: role {self.role!r} not in {ROLES}")
        if not self.targets:
            raise RegistryError(f"patch {self.id}: declares no targets")
        paths = [(t.path, t.upstream) for t in self.targets]
        if len(set(paths)) != len(paths):
            raise RegistryError(f"patch {self.id}: a target is declared twice")

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.module for t in self.targets))

    @property
    def package(self) -> str:
        """The folder (package) that owns this patch: ``sglang_overlay.patches.<id_with_underscores>``."""
        return f"sglang_overlay.patches.{package_name(self.id)}"

    def for_upstream(self, version: str | None) -> "Patch | None":
        """This patch with only the targets that apply to upstream ``version``; None when none does
        (the patch is not part of that release's series)."""
        targets = tuple(t for t in self.targets if t.applies_to(version))
        if not targets:
            return None
        return self if len(targets) == len(self.targets) else replace(self, targets=targets)


def package_name(patch_id: str) -> str:
    """The folder name of a patch id: ``cp-hicache-owner-lanes`` -> ``cp_hicache_owner_lanes``."""
    return patch_id.replace("-", "_")


def _load_declaration(module_name: str, extra: bool) -> Patch:
    module = importlib.import_module(module_name)
    patch = getattr(module, "PATCH", None)
    if not isinstance(patch, Patch):
        raise RegistryError(f"{module_name} has no PATCH = Patch(...) declaration")
    if not extra and module_name.rsplit(".", 1)[-1] != package_name(patch.id):
        raise RegistryError(f"{module_name} declares patch {patch.id!r}: its folder must be {package_name(patch.id)}")
    if not extra and patch.position < 1:
        raise RegistryError(f"patch {patch.id}: a patch of the series declares its position (>= 1)")
    if extra:
        patch = replace(patch, extra=True)
    return patch


ANY_UPSTREAM = "*"  # discover_patches(ANY_UPSTREAM): every target of every release


def discover_patches(upstream: str | None = None) -> list[Patch]:
    """Every declared patch in series order, then the extras (``SGLANG_OVERLAY_EXTRA_PATCHES``).

    Each patch keeps only the targets that apply to upstream release ``upstream`` (default: the
    pin in use, read from the lock); a patch with none left is not part of that release's series.
    ``ANY_UPSTREAM`` keeps every target of every release (the registry's own checks, the docs).
    """
    from sglang_overlay import patches as series_pkg

    names = sorted(m.name for m in pkgutil.iter_modules(series_pkg.__path__) if m.ispkg and not m.name.startswith("_"))
    series = sorted((_load_declaration(f"{series_pkg.__name__}.{n}", extra=False) for n in names),
                    key=lambda p: p.position)
    found = series + [_load_declaration(n, extra=True) for n in settings.extra_patch_modules()]
    _check_unique(series, found)
    if upstream == ANY_UPSTREAM:
        return found
    if upstream is None:
        from sglang_overlay.core import lockfile

        upstream = lockfile.read_pin().version
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
    targets = [(t.path, t.upstream) for p in found for t in p.targets]
    dup = {t for t, _ in targets if targets.count((t, _)) > 1}
    if dup:
        raise RegistryError(f"targets hooked by more than one patch: {sorted(dup)}")
