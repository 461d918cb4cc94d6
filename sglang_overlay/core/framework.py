"""SGLang's plugin framework as the core relies on it, locked and fingerprinted like a patch's dependencies.

The core calls, reads or replaces these definitions without hooking them: ``HookRegistry`` (``register``,
``apply_hooks``, and its ``_hooks`` and ``_patched`` internals, which ``core.hooking`` reads and writes),
``HookType`` and ``HookSource``, ``_propagate_patch`` (replaced for one call by ``core.propagation``),
``_wrap_fn`` (whose closures and ``__wrapped__`` ``introspection.chain_holds`` walks), and ``load_plugins`` /
``load_plugins_by_group`` (which run the plugin, swallow its ``Exception`` but not its ``SystemExit``, and
read ``SGLANG_PLUGINS``, as ``readiness.plugin_discovery`` assumes). :data:`DEPENDS` lists them under the owner
:data:`ID` (``sglang-plugin-framework``): ``sglang-overlay lock`` locks them in each pin's ``dependencies``
beside the patches' own, ``rebase-check`` compares them, and a changed one refuses start-up (fatal: nothing can
be hooked on a framework the core was not written against), naming what changed and who relies on it.

Invariant: the framework is not a patch (no target, no knob, no probe, never in the series); :func:`locked`
is every owner a lock holds, the patches and the framework. Cost: its fingerprints are vouched for by the
modules' seals like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_overlay.core.declarations import Dependency, Patch

ID = "sglang-plugin-framework"
_REGISTRY = "sglang.srt.plugins.hook_registry"
_PLUGINS = "sglang.srt.plugins"

DEPENDS = (
    Dependency(_REGISTRY, "HookRegistry", "core.hooking (register, apply_hooks; _hooks and _patched)"),
    Dependency(_REGISTRY, "HookType", "core.hooking"),
    Dependency(_REGISTRY, "HookSource", "core.hooking"),
    Dependency(_REGISTRY, "_propagate_patch", "core.propagation (replaced for one call)"),
    Dependency(_REGISTRY, "_wrap_fn", "core.introspection.chain_holds (closures, __wrapped__)"),
    Dependency(_PLUGINS, "load_plugins", "plugin (its except Exception lets OverlayStartupError through)"),
    Dependency(_PLUGINS, "load_plugins_by_group", "core.readiness.plugin_discovery (entry points, SGLANG_PLUGINS)"),
)


@dataclass(frozen=True)
class Owner:
    """What a lock holds of one owner, a patch or the framework: its id, targets and dependencies."""

    id: str
    targets: tuple = ()
    depends: tuple[Dependency, ...] = ()


def locked(patches: list[Patch], depends: dict[str, tuple[Dependency, ...]]) -> list[Owner]:
    """Every owner a lock holds (``lock``, ``rebase-check``): ``patches`` with their ``depends`` (found by
    ``core.dependencies``, or read back from a lock), then the framework."""
    return [*(Owner(p.id, p.targets, depends.get(p.id, ())) for p in patches), Owner(ID, (), DEPENDS)]
