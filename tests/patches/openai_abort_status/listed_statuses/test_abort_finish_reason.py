"""The choke-point hook, in-process: handle_abort_finish_reason around upstream's own method.

``original`` is upstream's ``TokenizerManager._handle_abort_finish_reason`` itself; the manager
it runs on is a stand-in holding only the bookkeeping that method touches (``rid_to_state``,
``enable_lora``, a real upstream ``LoRARegistry``). The two shapes of a finished output are
upstream 0.5.20's: ``_handle_batch_output`` (meta_info with ``prompt_tokens``; it has already
released the LoRA reference) and the scheduler's abort echo ``_handle_abort_req`` (no
``prompt_tokens``, nothing released). test_lora_release.py checks the same counts through the
real TokenizerManager request path in a subprocess; this file is the fast, in-process twin.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from types import SimpleNamespace

import pytest
from fastapi import HTTPException

from sglang_overlay.patches.openai_abort_status.listed_statuses.finish_reason import handle_abort_finish_reason

ADAPTER = "adapter"


def upstream_method():
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    method = TokenizerManager._handle_abort_finish_reason
    return getattr(method, "__wrapped__", method)  # the overlay may be applied in this process


def registry():
    from sglang.srt.lora.lora_registry import LoRARef, LoRARegistry

    ref = LoRARef(lora_id=LoRARef.deterministic_id(ADAPTER, "/a"), lora_name=ADAPTER, lora_path="/a", pinned=False)
    return LoRARegistry([ref]), ref.lora_id


def finished_output(rid: str, code, via: str, message: str | None = "scripted abort") -> dict:
    reason = {"type": "abort", "status_code": code}
    if message is not None:
        reason["message"] = message
    meta = {"id": rid, "finish_reason": reason, "weight_version": "default", "e2e_latency": 0.1}
    if via == "output":  # _handle_batch_output's meta_info
        meta.update(prompt_tokens=3, num_retractions=0, completion_tokens=1)
    return {"text": "", "output_ids": [], "meta_info": meta}


async def run_case(code, via: str, stream: bool, *, enable_lora=True, lora_path=ADAPTER, state_live=False):
    """One finished request through the hook; returns (outcome, count left on the adapter, manager)."""
    lora, lora_id = registry()
    obj = SimpleNamespace(rid="r1", lora_path=lora_path, lora_id=lora_id if lora_path else None)
    state = SimpleNamespace(obj=obj)
    manager = SimpleNamespace(rid_to_state={"r1": state} if state_live else {}, enable_lora=enable_lora,
                              lora_registry=lora)  # fmt: skip
    counter = lora._counters[lora_id]
    if lora_path:
        await lora.acquire(ADAPTER)  # _validate_and_resolve_lora
        if via == "output":
            await lora.release(lora_id)  # what _handle_batch_output did when the request finished
    out = finished_output("r1", code, via)
    try:
        result = await handle_abort_finish_reason(upstream_method(), manager, out, state, stream)
        outcome = "out" if result is out else result
    except HTTPException as exc:
        outcome = ("HTTPException", exc.status_code, exc.detail)
    except ValueError as exc:
        outcome = ("ValueError", str(exc))
    return outcome, counter.value(), manager


CODES = [(503, 503), ("429", 429), (HTTPStatus.INTERNAL_SERVER_ERROR, 500), ("abc", 500), (400, 400), (None, None)]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("via", ["output", "abort_req"])
@pytest.mark.parametrize("code, status", CODES)
def test_each_request_releases_its_lora_reference_exactly_once(code, status, via, stream):
    outcome, count, _ = asyncio.run(run_case(code, via, stream))
    assert count == 0
    if status is None:  # graceful: upstream's normal flow
        assert outcome is None
    elif stream:
        assert outcome == "out"
    elif status == 400:
        assert outcome == ("ValueError", "scripted abort")
    else:
        note = " (abort status_code 'abc' is not an HTTP error status; reported as 500)" if code == "abc" else ""
        assert outcome == ("HTTPException", status, "scripted abort" + note)


@pytest.mark.parametrize("kwargs", [dict(enable_lora=False), dict(lora_path=None)])
@pytest.mark.parametrize("via", ["output", "abort_req"])
def test_without_a_lora_request_nothing_is_released(kwargs, via):
    outcome, count, _ = asyncio.run(run_case(503, via, False, **kwargs))
    assert outcome[:2] == ("HTTPException", 503)
    held = 1 if kwargs.get("lora_path", ADAPTER) and via == "abort_req" else 0
    assert count == held  # acquired by the request; the hook must not touch it when LoRA is off


@pytest.mark.parametrize("code, removed", [(503, True), ("429", True), (400, False), (None, False)])
def test_the_request_state_is_released_for_error_statuses(code, removed):
    _, _, manager = asyncio.run(run_case(code, "abort_req", True, state_live=True))
    assert ("r1" not in manager.rid_to_state) is removed


def test_a_normal_finish_goes_to_upstream_untouched():
    async def run():
        lora, lora_id = registry()
        await lora.acquire(ADAPTER)
        await lora.release(lora_id)
        state = SimpleNamespace(obj=SimpleNamespace(rid="r1", lora_path=ADAPTER, lora_id=lora_id))
        manager = SimpleNamespace(rid_to_state={}, enable_lora=True, lora_registry=lora)
        out = finished_output("r1", None, "output")
        out["meta_info"]["finish_reason"] = {"type": "stop", "matched": 2}
        result = await handle_abort_finish_reason(upstream_method(), manager, out, state, False)
        return result, lora._counters[lora_id].value(), out

    result, count, out = asyncio.run(run())
    assert result is None and count == 0 and out["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}
