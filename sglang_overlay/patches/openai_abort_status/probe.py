"""Still needed? Upstream's abort choke point, fed the status codes upstream itself and its peers produce.

``probe()`` runs upstream's own ``TokenizerManager._handle_abort_finish_reason`` (unwrapped), non-streaming,
on a finished output ``{"type": "abort", "status_code": CODE}`` for each code of :data:`CODES` (what msgpack
IPC, a router, a disaggregation peer or numpy hand over). The right answer is upstream's own HTTP error:
``HTTPException`` with that status as an ``int`` (or an int subclass). Anything else (the output passed on as a normal finish,
so the client gets HTTP 200 and ``finish_reason: "abort"``; another exception; a status h11 refuses) is
the bug. Every code answered right at the choke point is not enough to drop the patch (its streaming
entries are not probed here): that is "cannot tell", never "fixed upstream".

Invariant: the manager is the bookkeeping the method reads (no rid state, LoRA off), nothing else.
Cost: importing upstream's tokenizer manager (about 10 s on 2 cores), then five calls.
"""

from __future__ import annotations

import asyncio
import enum
from types import SimpleNamespace

from sglang_overlay.core.registry import CANNOT_TELL, NEEDED, Finding


class _Peer(enum.IntEnum):  # an IntEnum status from another component
    TOO_MANY_REQUESTS = 429


def _codes() -> list[tuple[str, object, int]]:
    import numpy

    return [("503 (int)", 503, 503), ("429 (int)", 429, 429), ("'503' (str)", "503", 503),
            ("numpy 503", numpy.int64(503), 503), ("IntEnum 429", _Peer.TOO_MANY_REQUESTS, 429)]  # fmt: skip


def _answer(method, code) -> str | None:
    """None when upstream answers ``code`` as its HTTP error; else what it did."""
    from fastapi import HTTPException

    state = SimpleNamespace(obj=SimpleNamespace(rid="probe", lora_path=None, lora_id=None), lora_released=False)
    manager = SimpleNamespace(rid_to_state={}, enable_lora=False, lora_registry=None,
                              _release_lora_once=lambda _state: None)  # fmt: skip
    out = {"meta_info": {"id": "probe", "finish_reason": {"type": "abort", "status_code": code, "message": "probe"}}}
    try:
        asyncio.run(method(manager, out, state, False))
    except HTTPException as exc:
        if not isinstance(exc.status_code, int):  # numpy integers are not ints; h11 refuses them
            return f"HTTPException with a {type(exc.status_code).__name__} status (h11 drops the connection)"
        return None if int(exc.status_code) == int(code) else f"HTTP {int(exc.status_code)}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "a normal finish (HTTP 200, finish_reason abort)"


def probe() -> Finding:
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    method = TokenizerManager._handle_abort_finish_reason
    method = getattr(method, "__wrapped__", method)
    wrong = [(label, _answer(method, code)) for label, code, _ in _codes()]
    wrong = [(label, what) for label, what in wrong if what is not None]
    if not wrong:
        return Finding(CANNOT_TELL, "upstream's choke point answers every probed code as its HTTP error; its "
                       "streaming entries are not probed here: re-read 'When it can be dropped'")  # fmt: skip
    said = "; ".join(f"{label} -> {what}" for label, what in wrong)
    return Finding(NEEDED, f"TokenizerManager._handle_abort_finish_reason, non-streaming: {said}")
