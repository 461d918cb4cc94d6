"""Verification: does every enabled patch fit the installed upstream, and is this launch ready? Never applied.

``make_plan()`` is the side-effect-free answer per target (:class:`Status`: ``MATCH`` when the installed
definition's fingerprint equals the lock's; ``DRIFT``; ``MISSING``; ``UNLOCKED``). :func:`ready` is the ONE
rule for "this launch would run patched": the plugin at start-up, ``check`` and ``launch`` all ask it, so
``launch`` refuses exactly what start-up would, plus what only a launcher can see (the plugin not
discoverable, sglang not importing, an unfinished set-up).

Invariants: only ``MATCH`` is OK; a patch is applied whole or not at all; nothing here hooks, imports a
patch's implementation or imports sglang (except :func:`ready` with ``environment=True``, which asks the
installed sglang to import). Cost: a module file whose bytes the lock's seal vouches for is not parsed (one
sha256 of the file); any other is parsed once per target.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sglang_overlay.core import fingerprint, installed, lockfile, process_hook, settings
from sglang_overlay.core.registry import Dependency, Patch, Target, discover_patches
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


def declared_patches(version: str) -> list[Patch]:
    """The series for upstream ``version`` plus the extra declaration modules this process names
    (``SGLANG_OVERLAY_EXTRA_PATCHES``): what start-up applies and ``check`` reports."""
    return discover_patches(version, extra=tuple(settings.extra_patch_modules()))


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
    return Plan(patches, statuses, disabled, None)


# --------------------------------------------------------------------------- the one readiness rule


def unreached_patches(plan: Plan) -> list[str]:
    """Enabled patches that would run in processes SGLang starts without ``load_plugins()`` (tokenizer workers)."""
    return [p.id for p in plan.enabled if p.role in process_hook.NO_PLUGIN_ROLES]


def process_hook_problem(plan: Plan, role: str | None = None, argv: list[str] | None = None) -> str | None:
    """Why a process SGLang starts without ``load_plugins()`` could run an enabled patch's targets unpatched:
    no ``.pth`` hook here, a patch of the HTTP process enabled, and this process one that starts tokenizer
    workers with more than one asked for (or not told). None when nothing is at risk."""
    if process_hook.installed_path() is not None or settings.process_start_marked():
        return None
    at_risk = unreached_patches(plan)
    if not at_risk or (role is not None and role not in process_hook.LAUNCHER_ROLES):
        return None  # schedulers, detokenizers and DP controllers start no tokenizer worker
    workers = process_hook.tokenizer_workers_requested(argv)
    if workers == 1:
        return None
    asked = f"--tokenizer-worker-num {workers}" if workers else "possibly more than one, not told by the command line"
    return (
        f"the process-start hook ({process_hook.PTH_NAME}) is not in {process_hook.site_dirs()[0]}: SGLang would "
        f"start the tokenizer worker processes ({asked}) without load_plugins(), and patch(es) {at_risk} would "
        "run unpatched there. Reinstall the overlay non-editable (pip install sglang-overlay: the wheel carries "
        "the hook), or write it: sglang-overlay process-hook --install."
    )


def plugin_discovery() -> tuple[bool, str]:
    """Will SGLang's ``load_plugins()`` run the overlay in this environment? (its entry point, loaded)"""
    eps = [ep for ep in entry_points(group=settings.PLUGIN_GROUP) if ep.name == settings.PLUGIN_NAME]
    if not eps:
        return (
            False,
            f"no '{settings.PLUGIN_NAME}' entry point in {settings.PLUGIN_GROUP} (is sglang-overlay installed?)",
        )
    try:
        loaded = eps[0].load()
    except Exception as exc:  # what SGLang would log and then start without us
        return False, f"entry point {eps[0].value} fails to load: {exc!r}"
    if (getattr(loaded, "__module__", None), getattr(loaded, "__qualname__", None)) != (settings.PLUGIN_MODULE, "load"):
        return False, f"entry point {eps[0].value} loads {loaded!r}, not this overlay (shadowed?)"
    whitelist = settings.sglang_plugins_whitelist()
    if whitelist is not None and settings.PLUGIN_NAME not in whitelist:
        return False, (
            f"{settings.SGLANG_PLUGINS}={settings.sglang_plugins_raw()!r} does not name "
            f"'{settings.PLUGIN_NAME}': SGLang would skip the overlay silently. Add it to the list or unset it."
        )
    return True, f"{eps[0].value} (dist {eps[0].dist.name if eps[0].dist else '?'})"


def setup_incomplete() -> bool:
    """``scripts/apply_patches.sh`` marks an environment whose set-up has not finished."""
    return Path(sys.prefix, ".sglang-overlay-incomplete").exists()


def ready(plan: Plan, role: str | None = None, argv: list[str] | None = None, environment: bool = False) -> list[str]:
    """Everything that keeps this launch from running patched, one message each (empty: ready).

    Start-up (the plugin, ``environment=False``): the version pin, each enabled patch that does not verify
    and the process-start hook. ``check`` and ``launch`` (``environment=True``) add what a process that is
    already running the plugin cannot see: the plugin's discovery, sglang importing, a finished set-up."""
    if plan.version_problem:
        return [plan.version_problem]
    problems = [r for r in (plan.refusal(p) for p in plan.enabled) if r]
    hook = process_hook_problem(plan, role, argv)
    if hook:
        problems.append(hook)
    if environment:
        discoverable, how = plugin_discovery()
        if not discoverable:
            problems.append(f"SGLang would not load the overlay: {how}")
        problems += [p for p in (installed.import_problem(),) if p]
        if setup_incomplete():
            problems.append(f"{sys.prefix}: environment set-up did not finish; rerun scripts/apply_patches.sh")
    return problems
