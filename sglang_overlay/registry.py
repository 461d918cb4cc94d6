"""The patch registry: every patch is declared once, as data.

A patch is one declaration module under ``sglang_overlay/patches/`` holding a
``PATCH = Patch(...)`` plus one description under ``patches/<id>.md``. The
declaration names the upstream targets it hooks (module + qualified name), the
hook callable as a ``"module:function"`` string and SGLang's ``HookType`` by
name. Hook strings are resolved only when a target is applied, so importing a
declaration module stays cheap and pulls in neither torch nor upstream.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass, field

from sglang_overlay import settings

HOOK_TYPES = ("BEFORE", "AFTER", "AROUND", "REPLACE")
ROLES = ("scheduler", "http", "any")
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class RegistryError(ValueError):
    """A patch declaration is malformed (a bug in the overlay, not upstream drift)."""


@dataclass(frozen=True)
class Target:
    """One upstream object a patch hooks."""

    module: str  # upstream module, e.g. "sglang.srt.mem_cache.hiradix_cache"
    qualname: str  # object inside it, e.g. "HiRadixCache.load_back"
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

    def resolve_hook(self):
        module_name, _, func_name = self.hook.partition(":")
        obj = importlib.import_module(module_name)
        for part in func_name.split("."):
            obj = getattr(obj, part)
        return obj


@dataclass(frozen=True)
class Patch:
    """A patch of the series: id, title, description file, process role, targets."""

    id: str
    title: str
    description: str  # file name under patches/, e.g. "cp-hicache-owner-lanes.md"
    role: str  # the SGLang process whose imports reach the targets: scheduler | http | any
    targets: tuple[Target, ...]
    drop_when: str = ""  # the upstream change that makes this patch unnecessary
    extra: bool = field(default=False, compare=False)  # declared outside the shipped series

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise RegistryError(f"patch id {self.id!r} must be lower-case words joined by '-'")
        if self.role not in ROLES:
            raise RegistryError(f"patch {self.id}: role {self.role!r} not in {ROLES}")
        if not self.targets:
            raise RegistryError(f"patch {self.id}: declares no targets")
        paths = [t.path for t in self.targets]
        if len(set(paths)) != len(paths):
            raise RegistryError(f"patch {self.id}: a target is declared twice")

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.module for t in self.targets))


def _load_declaration(module_name: str, extra: bool) -> Patch:
    module = importlib.import_module(module_name)
    patch = getattr(module, "PATCH", None)
    if not isinstance(patch, Patch):
        raise RegistryError(f"{module_name} has no PATCH = Patch(...) declaration")
    if extra:
        patch = Patch(**{**patch.__dict__, "extra": True})
    return patch


def discover_patches() -> list[Patch]:
    """Every declared patch: the shipped series (sorted by module name), then extras."""
    from sglang_overlay import patches as series_pkg

    names = sorted(m.name for m in pkgutil.iter_modules(series_pkg.__path__) if not m.name.startswith("_"))
    found = [_load_declaration(f"{series_pkg.__name__}.{n}", extra=False) for n in names]
    found += [_load_declaration(n, extra=True) for n in settings.extra_patch_modules()]
    seen: dict[str, str] = {}
    for patch in found:
        if patch.id in seen:
            raise RegistryError(f"patch id {patch.id!r} declared twice")
        seen[patch.id] = patch.title
    targets = [t.path for p in found for t in p.targets]
    dup = {t for t in targets if targets.count(t) > 1}
    if dup:
        raise RegistryError(f"targets hooked by more than one patch: {sorted(dup)}")
    return found
