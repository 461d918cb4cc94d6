"""sglang < 0.5.23: every scheduler rank's ``ModelRunner`` reaches ``bootstrap.init_torch_distributed`` once,
through the module (so the hooked attribute is what runs), with keyword ``server_args``; the overlay hooks it."""

from __future__ import annotations

import ast
import inspect

import sglang_overlay


def test_the_model_runner_calls_it_through_the_module_with_server_args():
    from sglang.srt.model_executor import model_runner

    calls = [
        n
        for n in ast.walk(ast.parse(inspect.getsource(model_runner)))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "init_torch_distributed"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "bootstrap"
    ]
    assert calls and all("server_args" in {k.arg for k in c.keywords} for c in calls)


def test_the_overlay_hooks_it():
    sglang_overlay.apply()
    from sglang.srt.distributed import bootstrap

    assert hasattr(bootstrap.init_torch_distributed, "__wrapped__")
