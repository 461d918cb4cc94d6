"""``core.propagation`` on upstream's real ``HookRegistry``: the narrowed walk binds what the full walk binds.

A target module that has just executed can be bound only in modules imported while it executed; the narrowed
walk visits only those (counted), still replaces their stale ``from X import f`` binding, leaves upstream's walk
in place afterwards, and steps aside where upstream's walk is not there.
"""

from __future__ import annotations

import sys
import types

import pytest

from sglang_overlay.core import propagation

hook_registry = pytest.importorskip("sglang.srt.plugins.hook_registry")
HookRegistry, HookType = hook_registry.HookRegistry, hook_registry.HookType


@pytest.fixture
def modules():
    """A target module ``f`` lives in, one module imported before it and a circular one imported during it."""
    names = ("_ovl_prop_target", "_ovl_prop_early", "_ovl_prop_circular")
    made = {}
    for name in names:
        made[name] = sys.modules[name] = types.ModuleType(name)

    def f():
        return 1

    made["_ovl_prop_target"].f = f
    yield made, f
    for name in names:
        sys.modules.pop(name, None)
    HookRegistry._hooks.pop("_ovl_prop_target.f", None)
    HookRegistry._patched.discard("_ovl_prop_target.f")


def _hook(original, *args, **kwargs):
    return original(*args, **kwargs) + 1


def _apply(within=None):
    HookRegistry.register("_ovl_prop_target.f", _hook, HookType.AROUND)
    if within is None:
        HookRegistry.apply_hooks()
    else:
        with propagation.propagating_within(within):
            HookRegistry.apply_hooks()


def counting_walks(monkeypatch) -> list[int]:
    """The modules each restricted walk is given, counted by wrapping ``propagation._walk`` (the product keeps no count)."""
    walks: list[int] = []
    upstream_like = propagation._walk

    def counted(modules):
        modules = list(modules)
        walks.append(len(modules))
        return upstream_like(modules)

    monkeypatch.setattr(propagation, "_walk", counted)
    return walks


@pytest.mark.parametrize("narrowed", [True, False], ids=["narrowed", "upstream's full walk"])
def test_the_circular_importer_gets_the_hook_either_way(modules, narrowed, monkeypatch):
    made, f = modules
    before = frozenset(sys.modules) - {"_ovl_prop_circular"}  # the circular one imported during the target's run
    made["_ovl_prop_circular"].f = f  # its `from _ovl_prop_target import f`
    walks = counting_walks(monkeypatch)
    _apply(propagation.new_modules(before) if narrowed else None)
    assert made["_ovl_prop_target"].f() == 2 and made["_ovl_prop_circular"].f is made["_ovl_prop_target"].f
    assert not hasattr(made["_ovl_prop_early"], "f")
    assert walks == ([1] if narrowed else [])  # the circular module alone, not sys.modules


def test_upstreams_walk_is_back_after_the_block(modules):
    full = hook_registry._propagate_patch
    _apply([])
    assert hook_registry._propagate_patch is full


def test_without_upstreams_walk_nothing_is_replaced(monkeypatch):
    monkeypatch.delattr(hook_registry, propagation.WALK)
    with propagation.propagating_within([]):
        assert not hasattr(hook_registry, propagation.WALK)


def test_an_upstream_walk_of_another_shape_is_left_in_place(monkeypatch):
    def other(original, wrapped, source_module, skip=()):
        return 0

    monkeypatch.setattr(hook_registry, propagation.WALK, other)
    with propagation.propagating_within([]):
        assert getattr(hook_registry, propagation.WALK) is other
