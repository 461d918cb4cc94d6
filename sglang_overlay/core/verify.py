"""Verification: does every enabled patch fit the installed upstream, and is this launch ready? Never applied.

``make_plan()`` is the side-effect-free answer per target (:class:`Status`: ``MATCH`` when the installed
definition's fingerprint equals the lock's; ``DRIFT``; ``MISSING``; ``UNLOCKED``). :func:`readiness.ready` is the ONE
rule for "this launch would run patched" lives above it, in ``core.readiness``, and reads this plan.

Invariants: only ``MATCH`` is OK; a patch is applied whole or not at all; nothing here hooks, imports a
patch's implementation or imports sglang. Cost: a module file whose bytes the lock's seal vouches for is not parsed (one
sha256 of the file); any other is parsed once per target.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from sglang_overlay.core import fingerprint, framework, installed, lockfile, settings
from sglang_overlay.core.registry import Dependency, Patch, Target, declared_patches  # noqa: F401 (re-exported)
from sglang_overlay.errors import OverlayError
from sglang_overlay.version import __version__

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


def target_status(patch: Patch, target: Target | Dependency, lock: dict) -> TargetStatus:
    entry = lock.get("dependencies" if isinstance(target, Dependency) else "targets", {}).get(target.path)
    expected = entry["fingerprint"] if entry else None
    if expected and _seal_vouches(target, lock):  # match by construction: no parse
        return TargetStatus(patch.id, target, Status.MATCH, expected, expected)
    try:
        found = fingerprint.fingerprint_installed(target.module, target.qualname)
    except fingerprint.TargetNotFound as exc:
        return TargetStatus(patch.id, target, Status.MISSING, expected, None, str(exc))
    if expected is None:
        return TargetStatus(patch.id, target, Status.UNLOCKED, None, found)
    return TargetStatus(patch.id, target, Status.MATCH if found == expected else Status.DRIFT, expected, found)


def _supported() -> str:
    return ", ".join(f"sglang=={v}" for v in lockfile.pin_dirs())


def version_problem(pin: lockfile.Pin) -> str | None:
    """None when the installed sglang is the pinned one (or the user opted out)."""
    found = installed.installed_sglang_version()
    if found is None:
        return (
            f"sglang-overlay {__version__} found no sglang installed in this environment "
            f"({sys.prefix}); supported pins: {_supported()}. Install one first (pip install sglang==VERSION)."
        )
    try:
        same = Version(found) == Version(pin.version)
    except InvalidVersion:
        same = False
    if same or settings.allow_unpinned():
        return None
    return (
        f"sglang-overlay {__version__} does not support the installed sglang {found}: its lock pins "
        f"sglang=={pin.version} (supported pins: {_supported()}). Install a supported sglang (pip install sglang==VERSION), "
        f"or set {settings.ALLOW_UNPINNED}=1 to run on another version (per-target fingerprints are still enforced)."
    )


@dataclass
class Plan:
    """What applying would do in this process, computed without side effects."""

    patches: list[Patch]
    statuses: dict[str, list[TargetStatus]]
    disabled: list[str]
    version_problem: str | None
    framework: list[TargetStatus] = field(default_factory=list)  # SGLang's plugin framework (core.framework)

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
    problem = version_problem(pin)
    if problem is not None:  # another release's sources: their fingerprints would say nothing (nor parse, maybe)
        return Plan(patches, {}, disabled, problem)
    statuses = {
        p.id: [target_status(p, t, lock) for t in (*p.targets, *p.depends)] for p in patches if p.id not in disabled
    }
    framework_statuses = [target_status(framework.FRAMEWORK, d, lock) for d in framework.FRAMEWORK.depends]
    return Plan(patches, statuses, disabled, None, framework_statuses)
