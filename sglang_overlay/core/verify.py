"""Verification: does every enabled patch fit the installed upstream, and is this launch ready? Never applied.

``make_plan()`` is the side-effect-free answer per target (:class:`Status`: ``MATCH`` when the installed
definition's fingerprint equals the lock's; ``DRIFT``; ``MISSING``; ``UNLOCKED``). :func:`judge` is the one
comparison of a definition with its lock, whatever the source is read from: the installed upstream here,
another wheel in ``core.rebase``. The ONE rule for "this launch would run patched", ``ready()``, lives above it,
in ``core.readiness``, and reads this plan.

Invariants: only ``MATCH`` is OK; a patch is applied whole or not at all; nothing here hooks, imports a
patch's implementation or imports sglang. Cost: a module file whose bytes the lock's seal vouches for is not parsed (one
sha256 of the file); any other is parsed once per target.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang_overlay.core import fingerprint, framework, installed, lockfile, settings
from sglang_overlay.core.registry import Dependency, Patch, Target, declared_patches  # noqa: F401 (re-exported)
from sglang_overlay.errors import OverlayError

HOW_TO_PROCEED = (
    "Re-check the patch against this upstream (sglang-overlay rebase-check), then regenerate "
    "the lock (sglang-overlay lock); or run without it: SGLANG_OVERLAY_DISABLE={pid}, or "
    "SGLANG_OVERLAY_STRICT=0 to skip every patch that does not verify."
)


class Status(str, enum.Enum):
    """How one target of an enabled patch verifies (the value is what ``check`` prints)."""

    MATCH = "match"
    DRIFT = "drift"
    MISSING = "missing"
    UNLOCKED = "unlocked"

    @property
    def ok(self) -> bool:
        return self is Status.MATCH

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TargetStatus:
    """How one locked definition verifies: a hooked ``Target`` or a ``Dependency`` its hooks rely on."""

    patch: str
    target: Target | Dependency
    status: Status
    expected: str | None
    found: str | None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status.ok

    @property
    def is_dependency(self) -> bool:
        return isinstance(self.target, Dependency)

    def to_json(self) -> dict:
        row = {"patch": self.patch, "target": self.target.path, "status": str(self.status),
               "expected": self.expected, "found": self.found, "detail": self.detail}  # fmt: skip
        return {**row, "needed_by": self.target.needed_by} if self.is_dependency else row

    def describe(self) -> str:
        if self.is_dependency:
            head = (
                f"patch '{self.patch}' dependency {self.target.path} (called or overridden by its hook module "
                f"{self.target.needed_by}, not hooked)"
            )
        else:
            head = f"patch '{self.patch}' target {self.target.path}"
        if self.status is Status.DRIFT:
            return f"{head}: fingerprint drift (expected {self.expected}, found {self.found})"
        if self.status is Status.MISSING:
            return f"{head}: missing in the installed upstream ({self.detail})"
        if self.status is Status.UNLOCKED:
            return f"{head}: no fingerprint in the lock (found {self.found})"
        return f"{head}: {self.status}"


def _seal_vouches(target: Target | Dependency, lock: dict) -> bool:
    """The module file is byte-for-byte the one the lock's fingerprints were computed from."""
    seal = lock.get("modules", {}).get(target.module)
    return bool(seal) and seal == lockfile.module_seal(
        fingerprint.installed_file_digest(target.module),
        lockfile.module_fingerprints(lockfile.locked_entries(lock), target.module),
    )


def judge(owner: str, definition: Target | Dependency, expected: str | None, find: Callable[[], str]) -> TargetStatus:
    """One locked definition against the source ``find()`` fingerprints (the installed upstream, or another wheel's):
    the one comparison start-up, ``check``, ``launch`` and ``rebase-check`` make, in one vocabulary (:class:`Status`).
    ``find`` raises ``TargetNotFound`` where the definition is not there."""
    try:
        found = find()
    except fingerprint.TargetNotFound as exc:
        return TargetStatus(owner, definition, Status.MISSING, expected, None, str(exc))
    if expected is None:
        return TargetStatus(owner, definition, Status.UNLOCKED, None, found)
    return TargetStatus(owner, definition, Status.MATCH if found == expected else Status.DRIFT, expected, found)


def locked_fingerprint(definition: Target | Dependency, lock: dict) -> str | None:
    """What ``lock`` holds for ``definition`` (a target, or a dependency), None where it holds nothing."""
    entry = lock.get("dependencies" if isinstance(definition, Dependency) else "targets", {}).get(definition.path)
    return entry["fingerprint"] if entry else None


def locked_dependencies(lock: dict, owner: str) -> tuple[Dependency, ...]:
    """What ``lock`` holds as ``owner``'s dependencies (``sglang-overlay lock`` found them: ``core.dependencies``)."""
    entries = sorted(lock.get("dependencies", {}).items())
    return tuple(
        Dependency(e["module"], e["qualname"], e.get("needed_by", ""))
        for _, e in entries
        if owner in e["patch"].split(",")
    )


def locked_owners(lock: dict, patches: list[Patch]) -> list[framework.Owner]:
    """Every owner ``lock`` holds for ``patches`` (their locked dependencies), then the framework: what
    ``rebase-check`` compares with another wheel."""
    return framework.locked(patches, {p.id: locked_dependencies(lock, p.id) for p in patches})


def target_status(owner: str, target: Target | Dependency, lock: dict) -> TargetStatus:
    """``target`` of ``owner`` (a patch id, or the framework's) in the installed upstream, against ``lock``."""
    expected = locked_fingerprint(target, lock)
    if expected and _seal_vouches(target, lock):  # match by construction: no parse
        return TargetStatus(owner, target, Status.MATCH, expected, expected)
    return judge(owner, target, expected, lambda: fingerprint.fingerprint_installed(target.module, target.qualname))


@dataclass
class Plan:
    """What applying would do in this process, computed without side effects."""

    patches: list[Patch]
    statuses: dict[str, list[TargetStatus]]
    disabled: list[str]
    version_problem: str | None
    framework: list[TargetStatus] = field(default_factory=list)  # SGLang's plugin framework (core.framework)
    depends: dict[str, tuple[Dependency, ...]] = field(default_factory=dict)  # patch id -> the lock's dependencies

    def problems(self, patch: Patch) -> list[TargetStatus]:
        return [s for s in self.statuses.get(patch.id, []) if not s.ok]

    def refusal(self, patch: Patch) -> str | None:
        """The message that refuses ``patch`` (None when every target verifies)."""
        problems = self.problems(patch)
        if not problems:
            return None
        return "; ".join(p.describe() for p in problems) + ". " + HOW_TO_PROCEED.format(pid=patch.id)

    @property
    def enabled(self) -> list[Patch]:
        return [p for p in self.patches if p.id not in self.disabled]


def make_plan(lock: dict | None = None) -> Plan:
    lock = lock if lock is not None else lockfile.read_lock()
    pin = lockfile.Pin(**lock["upstream"])
    patches = declared_patches(pin.version)
    known = {p.id for p in patches}
    disabled = settings.disabled_patch_ids()
    unknown = [d for d in disabled if d not in known]
    if unknown:
        raise OverlayError(f"{settings.DISABLE} names unknown patch id(s) {unknown}; known: {sorted(known)}")
    for patch in patches:
        if patch.id not in disabled:
            for knob in patch.knobs:
                knob.read()  # a malformed value refuses start-up here, before anything is hooked
    depends = {p.id: locked_dependencies(lock, p.id) for p in patches}
    problem = installed.version_problem(pin.version, list(lockfile.pin_dirs()))
    if problem is not None:  # another release's sources: their fingerprints would say nothing (nor parse, maybe)
        return Plan(patches, {}, disabled, problem, depends=depends)
    statuses = {
        p.id: [target_status(p.id, t, lock) for t in (*p.targets, *depends[p.id])]
        for p in patches
        if p.id not in disabled
    }
    framework_statuses = [target_status(framework.ID, d, lock) for d in framework.DEPENDS]
    return Plan(patches, statuses, disabled, None, framework_statuses, depends)
