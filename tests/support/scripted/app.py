"""The scripted server's app: upstream's FastAPI ``app`` with the scripted tokenizer manager installed.

``build_app`` publishes a CPU runtime (``tests/support/runtime.py``), installs ``ScriptedTokenizerManager`` as
upstream's global state and ``OpenAIServingChat`` / ``OpenAIServingCompletion`` on ``app.state`` the way
upstream's lifespan does, and adds the test-only ``GET /_scripted/stats`` (``STATS_PATH``). ``load_script``
resolves ``--script pkg.mod:fn``.

Invariant: runs in the server process only (it mutates upstream's module-level ``app``). Cost: imports upstream's
HTTP server (seconds).
"""

from __future__ import annotations

import importlib
from typing import Callable

from tests.support.scripted.manager import make_tokenizer_manager_class

STATS_PATH = "/_scripted/stats"


def load_script(spec: str) -> Callable:
    module_name, _, func_name = spec.partition(":")
    if not module_name or not func_name:
        raise ValueError(f"--script {spec!r}: expected 'package.module:function'")
    obj = importlib.import_module(module_name)
    for part in func_name.split("."):
        obj = getattr(obj, part)
    return obj


def build_app(script: Callable, model_name: str):
    """Upstream's FastAPI app with the scripted tokenizer manager installed (in this process)."""
    from fastapi.responses import ORJSONResponse
    from sglang.srt.entrypoints import http_server
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
    from sglang.srt.parser.template_manager import TemplateManager

    from tests.support.runtime import publish_cpu_runtime

    server_args = publish_cpu_runtime(role="tokenizer", served_model_name=model_name)
    manager = make_tokenizer_manager_class()(server_args, script)
    template_manager = TemplateManager()
    http_server.set_global_state(
        http_server._GlobalState(tokenizer_manager=manager, template_manager=template_manager, scheduler_info={})
    )
    app = http_server.app
    app.state.openai_serving_completion = OpenAIServingCompletion(manager, template_manager)
    app.state.openai_serving_chat = OpenAIServingChat(manager, template_manager)

    @app.get(STATS_PATH, response_class=ORJSONResponse)
    async def scripted_stats():  # test-only endpoint
        from sglang_overlay.core import hooking as application

        return {**manager.stats(), "overlay": application.status()}

    return app, manager
