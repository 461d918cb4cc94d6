"""Probe: sglang 0.5.23 abort-status handling for several status_code forms (CPU, no server).

Calls the REAL TokenizerManager._handle_abort_finish_reason (unbound) with a minimal stand-in `self`
(SimpleNamespace: rid_to_state, enable_lora=False, and the real _release_lora_once bound to it), in
both modes, and evaluates the streaming gate upstream uses in serving_chat.py:2568-2570 and
serving_completions.py:362-364: isinstance(finish_reason.get("status_code"), HTTPStatus).
Run: HF_HUB_OFFLINE=1 /work/r13/venv/bin/python /work/r13/probe_abort.py
"""
import asyncio
import inspect
import os
import types
from http import HTTPStatus

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import fastapi
import numpy as np
import sglang
from sglang.srt.entrypoints.openai import serving_chat, serving_completions
from sglang.srt.managers.tokenizer_manager import TokenizerManager

CODES = [("HTTPStatus.SERVICE_UNAVAILABLE", HTTPStatus.SERVICE_UNAVAILABLE), ("int 503", 503),
         ("np.int64(503)", np.int64(503)), ("'503'", "503"), ("int 429", 429), ("None", None),
         ("int 400", 400), ("int 200", 200)]


def fake_self():
    s = types.SimpleNamespace(rid_to_state={}, enable_lora=False, lora_registry=None)
    s._release_lora_once = types.MethodType(TokenizerManager._release_lora_once, s)
    return s


def call(code, is_stream):
    s = fake_self()
    state = types.SimpleNamespace(obj=types.SimpleNamespace(rid="r1", lora_path=None), lora_released=False)
    s.rid_to_state["r1"] = state
    out = {"meta_info": {"finish_reason": {"type": "abort", "status_code": code, "message": "overloaded"}}}
    try:
        r = asyncio.run(TokenizerManager._handle_abort_finish_reason(s, out, state, is_stream))
        kind = "graceful (None: normal flow)" if r is None else "returned out (stream abort path)"
    except fastapi.HTTPException as e:
        kind = f"HTTPException({e.status_code!r})"
    except Exception as e:  # noqa: BLE001
        kind = f"{type(e).__name__}: {e}"
    return kind, ("r1" in s.rid_to_state)


print("sglang", sglang.__version__)
for mod in (serving_chat, serving_completions):
    src = inspect.getsource(mod)
    gate_src = 'finish_reason.get("status_code"), HTTPStatus'
    print(f"{mod.__name__}: streaming gate `isinstance(finish_reason.get(\"status_code\"), HTTPStatus)` "
          f"present {src.count(gate_src)}x")
print(f"{'code':32s} | {'non-stream':34s} | {'stream (tokenizer_manager)':34s} | stream chunk gate")
for label, code in CODES:
    ns, ns_kept = call(code, False)
    st, st_kept = call(code, True)
    gate = isinstance(code, HTTPStatus)
    print(f"{label:32s} | {ns:34s} | {st:34s} | {'error chunk' if gate else 'finish_reason=abort (no error)'}"
          )
