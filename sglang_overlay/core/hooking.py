"""Hooking: apply a verified plan in this process, lazily, and prove each hook took.

The job, in order (``apply``, once per process, under one lock):

1. ``core.readiness.ready()``, the one readiness rule (the parts a running process can see). Strict (default):
   any problem raises ``OverlayError``. ``SGLANG_OVERLAY_STRICT=0``: a patch's own problem logs one warning
   and skips the patch whole (restoring any target of it already hooked, ``_revert``); a fatal one still
   raises; any other logs one warning.
2. A target whose module is already imported is hooked at once through SGLang's
   ``HookRegistry``. Any other waits in ``_STATE.pending`` and is hooked the moment
   its module finishes executing: the finder of ``core.import_watch`` (first on
   ``sys.meta_path`` while anything is pending) wraps that module's loader. So a
   process never imports a patch-target module it would not import anyway.
3. After hooking, the attribute must be a wrapper chain holding the overlay's hook
   and reaching the original object (``HookRegistry`` only logs a failure).
4. Observers (:class:`Observer`, ``sglang_overlay.observe``: records, the INFO line, ``/metrics``,
   ``/overlay/status``, the start-up cost) are told what happened and may ask to run once a module has
   executed (or, where this apply runs inside that module's own import, as in a tokenizer worker, at the first
   import after it defines a name). They are told after the decision, never asked: what one raises is one
   warning, and a process with none attached hooks exactly the same.

Invariants: a patch is applied whole or not at all; the finder leaves
``sys.meta_path`` once nothing is pending; ``_revert`` restores the stored object
and forgets the target in ``HookRegistry`` (hooks and patched set) so a later
registration applies afresh. Cost: ``apply`` itself is a few milliseconds (the
seal spares parsing, ``scripts/bench_plugin_overhead.py``); one ``find_spec`` of
the finder per import while targets are pending; a deferred hook's search for stale
bindings visits only the modules imported since its module began executing
(``core.propagation``; upstream's walk over all of ``sys.modules`` cost 30 ms a target in a
scheduler).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

from sglang_overlay.core import import_watch, lockfile, process_hook, propagation, settings
from sglang_overlay.core.introspection import chain_holds, raw_attribute, resolve_owner, unwrap_descriptor
from sglang_overlay.core.readiness import ready
from sglang_overlay.core.registry import Patch, Target
from sglang_overlay.core.verify import make_plan
from sglang_overlay.errors import OverlayError

logger = logging.getLogger("sglang_overlay")


# --------------------------------------------------------------------------- state


@dataclass
class _State:
    started: bool = False
    applied: dict[str, list[str]] = field(default_factory=dict)  # patch id -> targets hooked
    pending: dict[str, list[tuple[Patch, Target]]] = field(default_factory=dict)  # module -> targets
    skipped: dict[str, str] = field(default_factory=dict)  # patch id -> reason
    originals: dict[str, tuple[object, str, object]] = field(
        default_factory=dict
    )  # path -> (owner, attr, raw before hooking)
    after_import: dict[str, list] = field(default_factory=dict)  # module -> callbacks run once it executed
    defined: dict[tuple[str, str], list] = field(default_factory=dict)  # (executing module, name) -> callbacks
    finder: import_watch.AfterExecFinder | None = None
    apply_s: float = 0.0  # time apply() itself took (verification + immediate hooks)


_STATE = _State()
_LOCK = threading.RLock()


# --------------------------------------------------------------------------- observers


class Observer(Protocol):
    """What watches hooking from outside the core (``sglang_overlay.observe``). ``span(step)`` measures a step;
    ``changed(status)``: hooks were taken; ``started(status, role, announce)``: ``apply`` returned (``announce``:
    the role is known, say so once); ``watches(role)``: ``(module, name or None, callback)`` to run once
    ``module`` has executed (and defines ``name``)."""

    def span(self, step: str) -> AbstractContextManager: ...
    def changed(self, status: dict) -> None: ...
    def started(self, status: dict, role: str | None, announce: bool) -> None: ...
    def watches(self, role: str | None) -> list[tuple[str, str | None, Callable[[], None]]]: ...


_OBSERVERS: list[Observer] = []


def observe(observer: Observer) -> None:
    """Tell ``observer`` what hooking does in this process from now on (once per observer)."""
    if observer not in _OBSERVERS:
        _OBSERVERS.append(observer)


def _tell(event: str, *args) -> None:
    for observer in _OBSERVERS:
        _quietly(event, getattr(observer, event), *args)


def _quietly(what: str, call: Callable, *args):
    """``call(*args)``; an observer's failure is one warning (and None), never a refused or stopped process."""
    try:
        return call(*args)
    except Exception as exc:
        logger.warning("sglang-overlay: observer failed (%s): %r", what, exc)
        return None


@contextmanager
def _span(step: str):
    with ExitStack() as stack:
        for observer in _OBSERVERS:
            try:
                stack.enter_context(observer.span(step))
            except Exception as exc:
                logger.warning("sglang-overlay: observer failed (span %s): %r", step, exc)
        yield


def status() -> dict:
    """What this process has applied, is waiting to apply, and skipped."""
    with _LOCK:
        return {
            "started": _STATE.started,
            "applied": {k: list(v) for k, v in _STATE.applied.items()},
            "pending_modules": sorted(_STATE.pending),
            "pending_patches": sorted({p.id for items in _STATE.pending.values() for p, _ in items}),
            "skipped": dict(_STATE.skipped),
            "apply_s": _STATE.apply_s,
        }


# --------------------------------------------------------------------------- hooking


def _hook_target(patch: Patch, target: Target, before: frozenset[str] | None = None) -> None:
    """``before``: ``sys.modules``'s names as the target's module began executing (it has just executed): only the
    modules imported since, its hook's module included, can hold a stale binding of the target
    (``core.propagation``); None: every module (upstream's walk)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType

    owner = resolve_owner(target.module, target.owner_path)
    raw = raw_attribute(owner, target.attribute)
    original = unwrap_descriptor(raw)
    hook = target.resolve_hook()
    HookRegistry.register(
        target.path,
        hook,
        HookType[target.hook_type],
        source=HookSource(plugin_name=settings.PLUGIN_NAME, dist_name="sglang-overlay"),
    )
    # only this target waits in the registry: no other plugin's hook is applied with the narrowed walk
    alone = [t for t in HookRegistry._hooks if t not in HookRegistry._patched] == [target.path]
    narrowed = before is not None and alone
    with propagation.propagating_within(propagation.new_modules(before)) if narrowed else nullcontext():
        HookRegistry.apply_hooks()
    current = raw_attribute(resolve_owner(target.module, target.owner_path), target.attribute)
    if not chain_holds(current, hook, original):
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
        HookRegistry._patched.discard(path)  # else a later registration of the path is never applied
    for module, items in list(_STATE.pending.items()):
        _STATE.pending[module] = [(p, t) for p, t in items if p.id != patch_id]
        if not _STATE.pending[module]:
            del _STATE.pending[module]
    _drop_finder_if_idle()


def _drop_finder_if_idle() -> None:
    """Leave sys.meta_path as it was once no target waits for its module."""
    if not _STATE.pending and not _STATE.after_import and not _STATE.defined and _STATE.finder is not None:
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


def _apply_module(module: str, before: frozenset[str] | None = None) -> None:
    """Hook every pending target of ``module`` (now executed); ``before``: ``sys.modules``'s names as its execution
    began, where it has just executed (None: it was imported before ``apply()``)."""
    with _LOCK, _span("hooks"):  # a target's module just imported: its hooks
        items = _STATE.pending.pop(module, [])
        for patch, target in items:
            if patch.id in _STATE.skipped:
                continue
            try:
                _hook_target(patch, target, before)
            except OverlayError as exc:
                _fail(patch.id, str(exc))
                continue
            except Exception as exc:  # resolving the hook or the owner failed
                _fail(patch.id, f"patch '{patch.id}' target {target.path}: cannot hook: {exc!r}")
                continue
            _STATE.applied.setdefault(patch.id, []).append(target.path)
        for callback in _STATE.after_import.pop(module, []):
            callback()
        _drop_finder_if_idle()
        if items:
            _tell("changed", status())


def _watched(module: str) -> bool:
    return module in _STATE.pending or module in _STATE.after_import


def _on_import() -> None:
    if _STATE.defined:
        _run_defined()


# --------------------------------------------------------------------------- entry


def apply(lock_path=None, role: str | None = None, announce: bool = True) -> dict:
    """Verify and apply every enabled patch in this process (idempotent).

    Targets in modules not yet imported are hooked when their module is first
    imported. Raises ``OverlayError`` in strict mode when anything does not verify.
    ``role`` and ``announce`` are for observers (``observe.processes``: the one INFO line where ``announce``,
    the record either way).
    """
    with _LOCK:
        if not _STATE.started:
            started = time.perf_counter()
            try:
                with _span("apply"):  # the lock, verification, the hooks of imported targets
                    _apply_unlocked(lock_path, role)
            finally:
                _STATE.apply_s = time.perf_counter() - started
        current = status()
        if _STATE.started:
            _tell("started", current, role, announce)
        return current


def deferred_finder():
    """The finder that hooks pending targets as their modules import (None when nothing is pending)."""
    return _STATE.finder


def _after_import(module: str, callback, name: str | None = None) -> None:
    """Run ``callback`` now if ``module`` has executed, else once it has (the finder of ``core.import_watch``); where this
    apply runs inside ``module``'s own execution (a tokenizer worker entered at a target its import pulls in),
    at the first import after ``module`` defines ``name``."""
    loaded = sys.modules.get(module)
    if loaded is None:
        _STATE.after_import.setdefault(module, []).append(callback)
    elif name and not hasattr(loaded, name):
        _STATE.defined.setdefault((module, name), []).append(callback)
    else:
        callback()


def _run_defined() -> None:
    with _LOCK:
        for (module, name), callbacks in list(_STATE.defined.items()):
            if hasattr(sys.modules.get(module), name):
                del _STATE.defined[(module, name)]
                for callback in callbacks:
                    callback()
        _drop_finder_if_idle()  # the finder leaves once nothing waits, as after a pending module's hooks


def _apply_unlocked(lock_path, role: str | None = None) -> None:
    """apply() under _LOCK, once per process."""
    plan = make_plan(lockfile.read_lock(lock_path) if lock_path else None)
    problems = ready(plan, role)
    refused = [p for p in problems if p.fatal or settings.strict()]
    if refused:
        raise OverlayError("; ".join(refused))
    for problem in problems:
        if problem.patch is None:
            logger.warning("sglang-overlay (%s=0): %s", settings.STRICT, problem)
    _STATE.started = True
    process_hook.mark_children()
    skipped = {p.patch: p for p in problems if p.patch is not None}
    for patch in plan.enabled:
        if patch.id in skipped:
            _fail(patch.id, skipped[patch.id])
            continue
        for target in patch.targets:
            _STATE.pending.setdefault(target.module, []).append((patch, target))
    for observer in _OBSERVERS:
        for module, name, callback in _quietly("watches", observer.watches, role) or ():
            _after_import(module, lambda c=callback, m=module: _quietly(f"after {m}", c), name)
    now = [m for m in _STATE.pending if m in sys.modules]
    if len(now) < len(_STATE.pending) or _STATE.after_import or _STATE.defined:
        _STATE.finder = import_watch.AfterExecFinder(_watched, _apply_module, _on_import)
        sys.meta_path.insert(0, _STATE.finder)
    for module in now:
        _apply_module(module)
