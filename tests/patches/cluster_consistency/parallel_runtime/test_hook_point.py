"""sglang >= 0.5.23: every scheduler rank reaches ``bootstrap.init_parallel_runtime`` once, through the module
(so the hooked attribute is what runs), with keyword ``server_args``; the overlay hooks it."""

from __future__ import annotations

import ast
import inspect

import sglang_overlay


def test_the_scheduler_calls_it_through_the_module_with_server_args():
    from sglang.srt.managers import scheduler

    calls = [
        n
        for n in ast.walk(ast.parse(inspect.getsource(scheduler)))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "init_parallel_runtime"
    ]
    assert calls and all(isinstance(c.func.value, ast.Name) and c.func.value.id == "bootstrap" for c in calls)
    assert all("server_args" in {k.arg for k in c.keywords} for c in calls)


def test_the_overlay_hooks_it():
    sglang_overlay.apply()
    from sglang.srt.distributed import bootstrap

    from sglang_overlay.patches.cluster_consistency.parallel_runtime.hook import after_parallel_runtime

    fn = bootstrap.init_parallel_runtime
    assert hasattr(fn, "__wrapped__") and after_parallel_runtime.__name__ == "after_group_init"
