"""SGLang's plugin framework as the core relies on it, locked and fingerprinted like a patch's dependencies.

The core calls, reads or replaces these definitions without hooking them: ``HookRegistry`` (``register``,
``apply_hooks``, and its ``_hooks`` and ``_patched`` internals, which ``core.hooking`` reads and writes),
``HookType`` and ``HookSource``, ``_propagate_patch`` (replaced for one call by ``core.propagation``),
``_wrap_fn`` (whose closures and ``__wrapped__`` ``introspection.chain_holds`` walks), and ``load_plugins`` /
``load_plugins_by_group`` (which run the plugin, swallow its ``Exception`` but not its ``SystemExit``, and
read ``SGLANG_PLUGINS``, as ``readiness.plugin_discovery`` assumes). :data:`FRAMEWORK` declares them as the
pseudo-patch ``sglang-plugin-framework``: ``sglang-overlay lock`` locks them in each pin's ``dependencies``,
``rebase-check`` compares them, and a changed one refuses start-up (fatal: nothing can be hooked on a
framework the core was not written against), naming what changed and who relies on it.

Invariant: the pseudo-patch is never in the series (``discover_patches`` does not return it): it has no
target, no knob, no probe. Cost: its fingerprints are vouched for by the modules' seals like any other.
"""

from __future__ import annotations

from sglang_overlay.core.declarations import Dependency, Patch

ID = "sglang-plugin-framework"
_REGISTRY = "sglang.srt.plugins.hook_registry"
_PLUGINS = "sglang.srt.plugins"

FRAMEWORK = Patch(
    id=ID,
    title="SGLang's plugin framework, as the core uses it",
    description="-",
    process="any",
    extra=True,
    depends=(
        Dependency(_REGISTRY, "HookRegistry", "core.hooking (register, apply_hooks; _hooks and _patched)"),
        Dependency(_REGISTRY, "HookType", "core.hooking"),
        Dependency(_REGISTRY, "HookSource", "core.hooking"),
        Dependency(_REGISTRY, "_propagate_patch", "core.propagation (replaced for one call)"),
        Dependency(_REGISTRY, "_wrap_fn", "core.introspection.chain_holds (closures, __wrapped__)"),
        Dependency(_PLUGINS, "load_plugins", "plugin (its except Exception lets OverlayStartupError through)"),
        Dependency(_PLUGINS, "load_plugins_by_group", "core.readiness.plugin_discovery (entry points, SGLANG_PLUGINS)"),
    ),
)


def with_framework(patches: list[Patch]) -> list[Patch]:
    """``patches`` and the framework, for what locks or compares fingerprints (``lock``, ``rebase-check``)."""
    return [*patches, FRAMEWORK]
