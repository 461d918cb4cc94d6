"""sglang >= 0.5.23: every scheduler rank reaches ``bootstrap.init_parallel_runtime`` once, through the module
(so the hooked attribute is what runs), with keyword ``server_args``; the release folder hooks it."""

from __future__ import annotations

import ast
import inspect


def test_the_scheduler_calls_it_through_the_module_with_server_args():
    from sglang.srt.managers import scheduler

    calls = [
        n
        for n in ast.walk(ast.parse(inspect.getsource(scheduler)))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "init_parallel_runtime"
    ]
    assert calls and all(isinstance(c.func.value, ast.Name) and c.func.value.id == "bootstrap" for c in calls)
    assert all("server_args" in {k.arg for k in c.keywords} for c in calls)


def test_the_release_hooks_exactly_that_function_after_it_returns():
    """What upstream calls is what the release folder declares (hooked through SGLang's HookRegistry at start-up:
    tests/core/test_overlay_plugin.py and tests/e2e/test_08_cluster.py show it in real processes)."""
    from sglang_overlay.core.installed import installed_sglang_version
    from sglang_overlay.core.registry import discover_patches

    (patch,) = [p for p in discover_patches(installed_sglang_version()) if p.id == "cluster-consistency"]
    assert [(t.path, t.hook_type) for t in patch.targets] == [
        ("sglang.srt.distributed.bootstrap.init_parallel_runtime", "AFTER")
    ]
