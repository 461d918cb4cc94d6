"""SGLang's plugin framework as the core relies on it (``core.framework``): locked in each pin's lock, found
by a scan of the core so the list cannot go stale, and refused at start-up, by ``check`` and by
``rebase-check`` alike when it changes."""

from __future__ import annotations

import ast
import copy

import pytest

from sglang_overlay.core import framework, lockfile, readiness, verify
from tests.support.env import REPO

FRAMEWORK_MODULES = {"sglang.srt.plugins", "sglang.srt.plugins.hook_registry"}
LOCKED = {d.path for d in framework.DEPENDS}


def _names_the_core_takes_from_the_framework() -> set[str]:
    """``module.name`` of every name the installed code imports from the framework's modules, and of every
    ``HookRegistry.<attr>`` it reads (covered by the class's own fingerprint), and propagation's walk."""
    found = set()
    for path in sorted((REPO / "sglang_overlay").rglob("*.py")):
        if "patches" in path.relative_to(REPO / "sglang_overlay").parts:
            continue  # a patch declares its own dependencies (tests/core/test_dependencies.py)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in FRAMEWORK_MODULES:
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "HookRegistry":
                found.add("sglang.srt.plugins.hook_registry.HookRegistry")
    from sglang_overlay.core import propagation

    found.add(f"{propagation.UPSTREAM}.{propagation.WALK}")
    return found


def test_every_framework_name_the_core_uses_is_locked():
    used = _names_the_core_takes_from_the_framework()
    assert "sglang.srt.plugins.hook_registry.HookRegistry" in used  # the scan sees the core's use at all
    assert used <= LOCKED, f"used by the core but not in core/framework.py: {sorted(used - LOCKED)}"


def test_each_pins_lock_holds_the_framework_with_the_modules_sealed():
    for pin in lockfile.pin_dirs():
        lock = lockfile.read_lock(lockfile.pin_dir(pin) / lockfile.LOCK_NAME)
        held = {p for p, e in lock["dependencies"].items() if framework.ID in e["patch"].split(",")}
        assert held == LOCKED, (pin, sorted(LOCKED ^ held))
        assert FRAMEWORK_MODULES <= set(lock["modules"]), pin


def test_the_framework_is_never_in_the_series():
    from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches

    assert framework.ID not in {p.id for p in discover_patches(ANY_UPSTREAM)}
    assert verify.make_plan().framework and all(s.ok for s in verify.make_plan().framework)


def _changed_framework_lock() -> dict:
    lock = copy.deepcopy(lockfile.read_lock())
    lock["dependencies"]["sglang.srt.plugins.hook_registry.HookRegistry"]["fingerprint"] = "sha256:" + "0" * 64
    return lock


def test_a_changed_framework_is_one_fatal_refusal_naming_what_changed(monkeypatch):
    plan = verify.make_plan(_changed_framework_lock())
    (problem,) = [p for p in readiness.ready(plan, role="scheduler") if "plugin framework" in p]
    assert problem.fatal and "HookRegistry" in problem and "fingerprint drift" in problem
    assert "core.hooking" in problem and "rebase-check" in problem
    monkeypatch.setenv("SGLANG_OVERLAY_DISABLE", ",".join(p.id for p in plan.patches))  # every patch off: still
    assert any(
        p.fatal and "plugin framework" in p for p in readiness.ready(verify.make_plan(_changed_framework_lock()))
    )


def test_start_up_and_check_refuse_a_changed_framework_before_anything_is_hooked(monkeypatch, capsys, tmp_path):
    from sglang_overlay import cli
    from sglang_overlay.core import hooking
    from sglang_overlay.errors import OverlayError

    changed = lockfile.write_lock(_changed_framework_lock(), tmp_path / "upstream.lock")
    monkeypatch.setenv("SGLANG_OVERLAY_LOCK", str(changed))  # check reads the override
    monkeypatch.setattr(hooking, "_STATE", hooking._State())
    monkeypatch.setenv("SGLANG_OVERLAY_STRICT", "0")  # fatal: refused even non-strict
    with pytest.raises(OverlayError, match="plugin framework"):
        hooking._apply_unlocked(changed)
    assert hooking._STATE.applied == {} and not hooking._STATE.started
    assert cli.main(["check"]) == 1
    out = capsys.readouterr().out
    assert "plugin framework" in out and framework.ID in out
