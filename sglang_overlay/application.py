"""Applying the series: verify against the lock, hook lazily, prove the hooks took.

SGLang's ``HookRegistry`` only logs a hook that failed to apply, and
``load_plugins()`` only logs a plugin that raised ``Exception``. This module
does its own checking around it:

1. Before anything is hooked, the installed sglang version is compared with the
   pin, and every enabled patch's targets are fingerprinted from source (no
   import) and compared with ``patches/upstream.lock``.
2. A target whose module is already imported is hooked at once through
   ``HookRegistry``. Any other target is hooked the moment its module finishes
   executing (a ``sys.meta_path`` finder wraps that module's loader), so a
   process never imports a patch-target module it would not import anyway.
3. After hooking, the attribute must be a wrapper chain holding the overlay's
   hook and reaching the original object.

Strict (default): any problem raises, naming patch, target, expected and found
fingerprint, and what to do. ``SGLANG_OVERLAY_STRICT=0``: one warning per
patch, and that patch is not applied at all (already hooked targets of it are
restored).
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import logging
import sys
import threading
import time
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from sglang_overlay import __version__, fingerprint, lockfile, settings, source_form
from sglang_overlay.registry import Patch, Target, discover_patches

logger = logging.getLogger("sglang_overlay")

HOW_TO_PROCEED = (
    "Re-check the patch against this upstream (sglang-overlay rebase-check), then regenerate "
    "the lock (sglang-overlay lock); or run without it: SGLANG_OVERLAY_DISABLE={pid}, or "
    "SGLANG_OVERLAY_STRICT=0 to skip every patch that does not verify."
)


class OverlayError(RuntimeError):
    """A patch cannot do its job (drift, missing target, hook that did not take)."""


class OverlayStartupError(SystemExit):
    """Raised from the plugin entry point: SGLang's ``load_plugins`` catches only
    ``Exception``, so a ``SystemExit`` is what actually ends start-up."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class TargetStatus:
    patch: str
    target: Target
    status: str  # match | drift | missing | unlocked
    expected: str | None
    found: str | None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("match", "source")

    def describe(self) -> str:
        head = f"patch '{self.patch}' target {self.target.path}"
        if self.status == "drift":
            return f"{head}: fingerprint drift (expected {self.expected}, found {self.found})"
        if self.status == "missing":
            return f"{head}: target missing in the installed upstream ({self.detail})"
        if self.status == "source-drift":
            return f"{head}: source form does not verify ({self.detail})"
        if self.status == "unlocked":
            return f"{head}: no fingerprint in the lock (found {self.found})"
        return f"{head}: {self.status}"


def target_status(patch: Patch, target: Target, lock: dict) -> TargetStatus:
    entry = lock["targets"].get(target.path)
    expected = entry["fingerprint"] if entry else None
    seal = lock.get("modules", {}).get(target.module)
    # Fast path: the module file is byte-for-byte the one the lock's fingerprints were computed
    # from (the seal binds both), so they match by construction; parse only when it differs.
    if expected and seal and seal == lockfile.module_seal(
        fingerprint.installed_file_digest(target.module), lockfile.module_fingerprints(lock["targets"], target.module)
    ):
        return TargetStatus(patch.id, target, "match", expected, expected)
    try:
        found = fingerprint.fingerprint_installed(target.module, target.qualname)
    except fingerprint.TargetNotFound as exc:
        return TargetStatus(patch.id, target, "missing", expected, None, str(exc))
    if expected is None:
        return TargetStatus(patch.id, target, "unlocked", None, found)
    return TargetStatus(patch.id, target, "match" if found == expected else "drift", expected, found)


def installed_sglang_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def version_problem(pin: lockfile.Pin) -> str | None:
    """None when the installed sglang is the pinned one (or the user opted out)."""
    found = installed_sglang_version()
    if found is None:
        return f"sglang-overlay {__version__} is pinned to sglang=={pin.version}, found no sglang installed"
    try:
        same = Version(found) == Version(pin.version)
    except InvalidVersion:
        same = False
    if same or settings.allow_unpinned():
        return None
    return (
        f"sglang-overlay {__version__} is pinned to sglang=={pin.version}, found {found}. "
        f"Install the pin (scripts/apply_patches.sh), or set {settings.ALLOW_UNPINNED}=1 to run "
        "on another version (per-target fingerprints are still enforced)."
    )


@dataclass
class Plan:
    """What apply() would do in this process, computed without side effects."""

    patches: list[Patch]
    statuses: dict[str, list[TargetStatus]]
    disabled: list[str]
    version_problem: str | None
    source: dict[str, dict] = field(default_factory=dict)  # patch id -> marker: carried by the sources

    def problems(self, patch: Patch) -> list[TargetStatus]:
        return [s for s in self.statuses.get(patch.id, []) if not s.ok]

    @property
    def enabled(self) -> list[Patch]:
        return [p for p in self.patches if p.id not in self.disabled]


def make_plan(lock: dict | None = None) -> Plan:
    lock = lock if lock is not None else lockfile.read_lock()
    patches = discover_patches()
    known = {p.id for p in patches}
    disabled = settings.disabled_patch_ids()
    unknown = [d for d in disabled if d not in known]
    if unknown:
        raise OverlayError(
            f"{settings.DISABLE} names unknown patch id(s) {unknown}; known: {sorted(known)}"
        )
    source = source_form.applied_series()
    shipped: dict = {}
    finals: dict = {}
    if source:
        from sglang_overlay import series_diff

        shipped = series_diff.shipped_markers()
        finals = source_form.final_file_digests([source[p.id] for p in patches if p.id in source])
    statuses = {p.id: _source_statuses(p, source[p.id], lock, shipped.get(p.id), finals) if p.id in source else
                [target_status(p, t, lock) for t in p.targets] for p in patches if p.id not in disabled}
    pin = lockfile.Pin(**lock["upstream"])
    return Plan(patches, statuses, disabled, version_problem(pin), source)


def _source_statuses(patch: Patch, record: dict, lock: dict, shipped: dict | None, finals: dict) -> list[TargetStatus]:
    """A patch the sglang sources carry (source form): verified against its marker, the shipped
    diff and the lock instead of hooked (status "source", or "source-drift")."""
    problems = source_form.source_target_problem(patch, record, lock, shipped, finals)
    expected = {t.path: lock["targets"].get(t.path, {}).get("fingerprint") for t in patch.targets}
    return [TargetStatus(patch.id, t, "source-drift" if problems[t.path] else "source", expected[t.path],
                         record["digest"], problems[t.path] or "") for t in patch.targets]


# --------------------------------------------------------------------------- state


@dataclass
class _State:
    started: bool = False
    applied: dict[str, list[str]] = field(default_factory=dict)  # patch id -> targets hooked
    pending: dict[str, list[tuple[Patch, Target]]] = field(default_factory=dict)  # module -> targets
    skipped: dict[str, str] = field(default_factory=dict)  # patch id -> reason
    originals: dict[str, tuple[object, str, object]] = field(default_factory=dict)  # path -> (owner, attr, raw before hooking)
    source: dict[str, list[Target]] = field(default_factory=dict)  # patch id -> targets the sources carry
    finder: "_DeferredPatchFinder | None" = None
    apply_s: float = 0.0  # time apply() itself took (verification + immediate hooks)


_STATE = _State()
_LOCK = threading.RLock()


def status() -> dict:
    """What this process has applied, is waiting to apply, and skipped."""
    with _LOCK:
        applied = {k: list(v) for k, v in _STATE.applied.items()}
        for patch_id, targets in _STATE.source.items():
            live = [t.path for t in targets if _source_target_live(t)]
            if live:
                applied[patch_id] = live
        return {
            "started": _STATE.started,
            "applied": applied,
            "source_form": sorted(_STATE.source),
            "pending_modules": sorted(_STATE.pending),
            "skipped": dict(_STATE.skipped),
            "apply_s": _STATE.apply_s,
        }


# --------------------------------------------------------------------------- hooking


def _source_target_live(target: Target) -> bool:
    """A source-form target counts as applied once its module is imported and its attribute is
    the source form's wrapper (the same rule as a runtime hook: hooked when its module imports)."""
    if target.module not in sys.modules:
        return False
    try:
        raw = _raw_attribute(_resolve_owner(target), target.attribute)
    except AttributeError:
        return False
    return source_form.is_source_wrapper(raw, target.path)


def _resolve_owner(target: Target):
    obj = sys.modules[target.module]
    for part in target.owner_path:
        obj = getattr(obj, part)
    return obj


def _raw_attribute(owner, attr: str):
    """The attribute as stored (classmethod/staticmethod objects kept)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attr in klass.__dict__:
                return klass.__dict__[attr]
    return getattr(owner, attr)


def _unwrap_descriptor(obj):
    return obj.__func__ if isinstance(obj, (classmethod, staticmethod)) else obj


def _chain_holds(current, hook, original) -> bool:
    """True when the wrapper chain starting at ``current`` holds ``hook`` and reaches ``original``."""
    fn = _unwrap_descriptor(current)
    saw_hook = False
    seen = 0
    while fn is not None and seen < 64:
        if fn is original:
            return saw_hook
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                if cell.cell_contents is hook:
                    saw_hook = True
            except ValueError:  # empty cell
                pass
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return False


def _hook_target(patch: Patch, target: Target) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType

    owner = _resolve_owner(target)
    raw = _raw_attribute(owner, target.attribute)
    original = _unwrap_descriptor(raw)
    hook = target.resolve_hook()
    HookRegistry.register(
        target.path,
        hook,
        HookType[target.hook_type],
        source=HookSource(plugin_name=settings.PLUGIN_NAME, dist_name="sglang-overlay"),
    )
    HookRegistry.apply_hooks()
    current = _raw_attribute(_resolve_owner(target), target.attribute)
    if not _chain_holds(current, hook, original):
        raise OverlayError(
            f"patch '{patch.id}' target {target.path}: the hook did not take "
            f"(found {current!r}; SGLang's HookRegistry logs why above)"
        )
    # Targets are definitions in the owner's own body (fingerprints are read from there), so
    # restoring the stored object undoes the hook.
    _STATE.originals[target.path] = (owner, target.attribute, raw)


def _revert(patch_id: str) -> None:
    """Restore every target of a patch that was already hooked (non-strict skip)."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    for path in _STATE.applied.pop(patch_id, []):
        owner, attr, raw = _STATE.originals.pop(path)
        setattr(owner, attr, raw)
        HookRegistry._hooks.pop(path, None)
    for module, items in list(_STATE.pending.items()):
        _STATE.pending[module] = [(p, t) for p, t in items if p.id != patch_id]
        if not _STATE.pending[module]:
            del _STATE.pending[module]
    _drop_finder_if_idle()


def _drop_finder_if_idle() -> None:
    """Leave sys.meta_path as it was once no target waits for its module."""
    if not _STATE.pending and _STATE.finder is not None:
        try:
            sys.meta_path.remove(_STATE.finder)
        except ValueError:
            pass
        _STATE.finder = None


def _fail(patch_id: str, message: str) -> None:
    """Strict: raise. Non-strict: one warning, the patch is skipped whole."""
    if settings.strict():
        raise OverlayError(message)
    if patch_id not in _STATE.skipped:
        logger.warning("sglang-overlay: skipping patch '%s' (%s=0): %s", patch_id, settings.STRICT, message)
    _STATE.skipped[patch_id] = message
    _revert(patch_id)


def _apply_module(module: str) -> None:
    """Hook every pending target of ``module`` (now executed)."""
    with _LOCK:
        items = _STATE.pending.pop(module, [])
        for patch, target in items:
            if patch.id in _STATE.skipped:
                continue
            try:
                _hook_target(patch, target)
            except OverlayError as exc:
                _fail(patch.id, str(exc))
                continue
            except Exception as exc:  # resolving the hook or the owner failed
                _fail(patch.id, f"patch '{patch.id}' target {target.path}: cannot hook: {exc!r}")
                continue
            _STATE.applied.setdefault(patch.id, []).append(target.path)
        _drop_finder_if_idle()


class _ApplyAfterExecLoader(importlib.abc.Loader):
    """Delegates to the real loader, then hooks the module's pending targets."""

    def __init__(self, inner, module: str):
        self._inner = inner
        self._module = module

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _apply_module(self._module)

    def __getattr__(self, name):  # get_source, get_filename, ... for inspect/linecache
        return getattr(self._inner, name)


class _DeferredPatchFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of modules that have pending targets."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _STATE.pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None:
            spec.loader = _ApplyAfterExecLoader(spec.loader, fullname)
        return spec


# --------------------------------------------------------------------------- entry


def apply(lock_path=None) -> dict:
    """Verify and apply every enabled patch in this process (idempotent).

    Targets in modules not yet imported are hooked when their module is first
    imported. Raises ``OverlayError`` in strict mode when anything does not verify.
    """
    with _LOCK:
        if _STATE.started:
            return status()
        started = time.perf_counter()
        try:
            _apply_unlocked(lock_path)
        finally:
            _STATE.apply_s = time.perf_counter() - started
        return status()


def _apply_unlocked(lock_path) -> None:
    """apply() under _LOCK, once per process."""
    if settings.source_applied():
        _STATE.started = True
        _STATE.skipped.update({"*": "the series is applied to the sources; runtime hooks are off"})
        return
    plan = make_plan(lockfile.read_lock(lock_path) if lock_path else None)
    if plan.version_problem:
        raise OverlayError(plan.version_problem)
    _STATE.started = True
    for patch in plan.enabled:
        problems = plan.problems(patch)
        if patch.id in plan.source and not problems:  # the sources carry it: no runtime hook
            _STATE.source[patch.id] = list(patch.targets)
            continue
        if problems:
            message = "; ".join(p.describe() for p in problems) + ". " + HOW_TO_PROCEED.format(pid=patch.id)
            _fail(patch.id, message)
            continue
        for target in patch.targets:
            _STATE.pending.setdefault(target.module, []).append((patch, target))
    ready = [m for m in _STATE.pending if m in sys.modules]
    if len(ready) < len(_STATE.pending):
        _STATE.finder = _DeferredPatchFinder()
        sys.meta_path.insert(0, _STATE.finder)
    for module in ready:
        _apply_module(module)

