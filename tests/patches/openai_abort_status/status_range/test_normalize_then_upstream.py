"""openai-abort-status on the sglang 0.5.23 pin: "normalize, then upstream".

Collected only where the installed sglang is 0.5.23 (tests/conftest.py: pin modules). ``original`` is
0.5.23's own ``TokenizerManager._handle_abort_finish_reason`` and its ``_release_lora_once``,
bound to a stand-in manager that holds only the bookkeeping they touch (``rid_to_state``,
``enable_lora``, a real upstream ``LoRARegistry``, the release-task set). Each case runs upstream
alone and upstream behind the hook, side by side, so the table shows what upstream loses.
The msgpack case goes through upstream's own IPC encoder and decoder (``io_struct``), which turn
the scheduler's ``HTTPStatus`` into a plain int.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from http import HTTPStatus
from types import MethodType, SimpleNamespace

import pytest

from sglang_overlay.patches.openai_abort_status.status_range.finish_reason import normalize_then_upstream

ADAPTER = "adapter"


def upstream():
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    method = TokenizerManager._handle_abort_finish_reason
    return getattr(method, "__wrapped__", method), TokenizerManager._release_lora_once


def msgpack_roundtrip(code):
    """The finish reason's code as the tokenizer manager receives it over msgpack IPC."""
    from sglang.srt.managers import io_struct

    req = io_struct.AbortReq(rid="r1", finished_reason={"type": "abort", "status_code": code, "message": "m"})
    return io_struct._msgpack_decoder.decode(io_struct._msgpack_encoder.encode(req)).finished_reason["status_code"]


async def run(code, stream: bool, hooked: bool, *, lora: bool = True):
    """One finished abort; returns (outcome, status code after the call, releases, state kept)."""
    from fastapi import HTTPException
    from sglang.srt.lora.lora_registry import LoRARef, LoRARegistry

    method, release_once = upstream()
    ref = LoRARef(lora_id=LoRARef.deterministic_id(ADAPTER, "/a"), lora_name=ADAPTER, lora_path="/a", pinned=False)
    registry = LoRARegistry([ref])
    await registry.acquire(ADAPTER)
    manager = SimpleNamespace(rid_to_state={}, enable_lora=lora, lora_registry=registry, _lora_release_tasks=set())
    manager._release_lora_once = MethodType(release_once, manager)
    state = SimpleNamespace(obj=SimpleNamespace(rid="r1", lora_path=ADAPTER if lora else None, lora_id=ref.lora_id),
                            lora_released=False)  # fmt: skip
    manager.rid_to_state["r1"] = state
    reason = {"type": "abort", "status_code": code, "message": "overloaded"}
    out = {"meta_info": {"id": "r1", "finish_reason": reason}}
    call = (
        (lambda: normalize_then_upstream(method, manager, out, state, stream))
        if hooked
        else (lambda: method(manager, out, state, stream))
    )
    try:
        result = await call()
        outcome = "graceful" if result is None else "stream abort"
    except HTTPException as exc:
        outcome = f"HTTP {int(exc.status_code)}"
    except ValueError:
        outcome = "ValueError"
    except TypeError:
        outcome = "TypeError"
    await asyncio.sleep(0)  # let upstream's release task run
    await asyncio.gather(*manager._lora_release_tasks)
    released = 1 - registry._counters[ref.lora_id].value()
    return outcome, reason["status_code"], released, "r1" in manager.rid_to_state


def _np503():
    import numpy as np

    return np.int64(503)


CASES = {  # code -> (upstream non-stream, overlay non-stream)
    "HTTPStatus 503": (lambda: HTTPStatus.SERVICE_UNAVAILABLE, "HTTP 503", "HTTP 503"),
    "int 503": (lambda: 503, "HTTP 503", "HTTP 503"),
    "msgpack 503": (lambda: msgpack_roundtrip(HTTPStatus.SERVICE_UNAVAILABLE), "HTTP 503", "HTTP 503"),
    "numpy 503": (_np503, "HTTP 503", "HTTP 503"),
    "'503'": (lambda: "503", "TypeError", "HTTP 503"),
    "' 429 '": (lambda: " 429 ", "TypeError", "HTTP 429"),
    "'abc'": (lambda: "abc", "TypeError", "HTTP 500"),
    "int 400": (lambda: 400, "ValueError", "ValueError"),
    "None": (lambda: None, "graceful", "graceful"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_non_stream_upstream_and_overlay(name):
    make, want_upstream, want_overlay = CASES[name]
    assert asyncio.run(run(make(), stream=False, hooked=False))[0] == want_upstream
    outcome, _, released, kept = asyncio.run(run(make(), stream=False, hooked=True))
    assert outcome == want_overlay
    error = want_overlay != "graceful"
    assert released == (1 if error else 0), "exactly one LoRA release per error abort (upstream's own)"
    assert kept is not error


@pytest.mark.parametrize("name", sorted(CASES))
def test_stream_reaches_the_handlers_as_an_httpstatus(name):
    """After the hook the streaming handlers' gate ``isinstance(code, HTTPStatus)`` holds for every error."""
    make, _, want_overlay = CASES[name]
    outcome, code, released, _ = asyncio.run(run(make(), stream=True, hooked=True))
    if want_overlay == "graceful":
        assert outcome == "graceful" and code is None and released == 0
        return
    want = HTTPStatus(int(want_overlay.split()[-1])) if want_overlay.startswith("HTTP") else HTTPStatus.BAD_REQUEST
    assert outcome == "stream abort"
    assert isinstance(code, HTTPStatus) and code == want
    assert released == 1


def test_upstream_streaming_gate_is_still_the_isinstance_test():
    """What the in-place normalization relies on: the 0.5.23 streaming handlers test the type."""
    from sglang.srt.entrypoints.openai import serving_chat, serving_completions

    for module in (serving_chat, serving_completions):
        source = re.sub(r"\s+", "", inspect.getsource(module))
        assert 'isinstance(finish_reason.get("status_code"),HTTPStatus)' in source, module


def test_msgpack_delivers_a_plain_int_that_upstream_streams_as_graceful():
    code = msgpack_roundtrip(HTTPStatus.SERVICE_UNAVAILABLE)
    assert type(code) is int and not isinstance(code, HTTPStatus)


def test_non_abort_outputs_pass_untouched():
    method, _ = upstream()
    out = {"meta_info": {"finish_reason": {"type": "length", "length": 4}}}
    before = repr(out)
    assert asyncio.run(normalize_then_upstream(method, SimpleNamespace(), out, None, False)) is None
    assert repr(out) == before
