"""The scripted server's stand-in scheduler: runs the test's script per (sub-)request, answers as upstream does.

``ScriptedScheduler`` feeds the script's results back as upstream ``BatchStrOutput`` objects through the real
``TokenizerManager._handle_batch_output``; finish reasons are upstream's ``FINISH_MATCHED_STR`` /
``FINISH_MATCHED_TOKEN`` / ``FINISH_ABORT``. An abort step with ``"via": "abort_req"`` is answered the way the
scheduler's timeout aborts are (an ``AbortReq`` echo for upstream's ``_handle_abort_req``); an ``AbortReq`` from
the tokenizer manager (client gone) cancels the script and answers with an abort finish.

Invariant: every message first crosses upstream's IPC serialization (``ipc_round_trip``: pickle, or upstream's
msgpack codec under ``SGLANG_USE_PICKLE_IPC=0``), as between real processes; a stand-in bug is printed and
counted (``stand_in_errors``), never a silent hang. Cost: one asyncio task per (sub-)request; streamed text is
emitted in up to 3 chunks.
"""

from __future__ import annotations

import asyncio
import functools
import pickle
import time
from array import array
from typing import Callable

from tests.support.scripted.tokenizer import EOS_TOKEN_ID, TOKEN, ScriptedTokenizedRequest


class ScriptedScheduler:
    """Stand-in scheduler (of a ``ScriptedTokenizerManager``): runs the script per request, answers with upstream
    BatchStrOutput objects."""

    def __init__(self, manager, script: Callable):
        self.manager = manager
        self.script = script
        self.tasks: dict[str, asyncio.Task] = {}
        self.counts = {"requests": 0, "aborts_received": 0, "finished": 0, "script_errors": 0, "stand_in_errors": 0}

    def submit(self, req: ScriptedTokenizedRequest, request_json: dict) -> None:
        self.counts["requests"] += 1
        task = asyncio.get_running_loop().create_task(self._run_logged(req, request_json))
        self.tasks[req.rid] = task
        task.add_done_callback(lambda _t, rid=req.rid: self.tasks.pop(rid, None))

    def abort(self, rid: str, abort_all: bool) -> None:
        self.counts["aborts_received"] += 1
        rids = list(self.tasks) if abort_all else [r for r in self.tasks if r.startswith(rid)]
        for r in rids:
            task = self.tasks.pop(r)
            task.cancel()
            from sglang.srt.managers.schedule_batch import FINISH_ABORT

            reason = FINISH_ABORT(message="Abort requested (scripted scheduler)").to_json()
            asyncio.get_running_loop().create_task(self._emit(r, "", 0, reason, 0))

    async def _emit(self, rid: str, text: str, prompt_words: int, finish_reason, completion_words: int):
        from sglang.srt.managers.io_struct import BatchStrOutput

        tokenizer = self.manager.tokenizer
        out = BatchStrOutput(
            rids=[rid],
            http_worker_ipcs=None,
            finished_reasons=[finish_reason],
            output_strs=[text],
            output_ids=[array("i", tokenizer.encode(text))],
            prompt_tokens=[prompt_words],
            completion_tokens=[completion_words],
            reasoning_tokens=[0],
            cached_tokens=[0],
            retraction_counts=[0],
            **{f: None for f in _optional_output_fields()},
        )
        if finish_reason is not None:
            self.counts["finished"] += 1
        await self.manager._handle_batch_output(ipc_round_trip(out))

    async def _gate(self, n: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.manager.peak_live_request_states < n and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def _drained(self, rid: str, timeout_s: float = 5.0) -> None:
        """Wait until upstream's waiter (_stream_one_response) has taken the pending outputs
        of ``rid``, so the next output is a separate chunk (capped: a stalled client)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.manager.rid_to_state.get(rid)
            if state is None or not state.out_list:
                return
            await asyncio.sleep(0.001)

    def _abort_in_scheduler(self, rid: str, reason: dict) -> None:
        """The scheduler's own abort (waiting/running timeout, queue full): an AbortReq echo
        carrying the finish reason, handled by upstream's ``_handle_abort_req``."""
        from sglang.srt.managers.io_struct import AbortReq

        self.counts["finished"] += 1
        self.manager._handle_abort_req(
            ipc_round_trip(AbortReq(rid=rid, abort_message=reason["message"], finished_reason=reason))
        )

    async def _run_logged(self, req: ScriptedTokenizedRequest, request_json: dict) -> None:
        try:
            await self._run(req, request_json)
        except asyncio.CancelledError:
            raise
        except BaseException:  # a stand-in bug must be seen, never a silent hang
            import traceback

            self.counts["stand_in_errors"] += 1
            print(f"scripted scheduler failed on {req.rid}:\n{traceback.format_exc()}", flush=True)
            raise

    async def _run(self, req: ScriptedTokenizedRequest, request_json: dict) -> None:
        from sglang.srt.managers.schedule_batch import (
            FINISH_ABORT,
            FINISH_LENGTH,
            FINISH_MATCHED_STR,
            FINISH_MATCHED_TOKEN,
        )

        prompt_words = len(req.input_text.split())
        if req.sampling_params.max_new_tokens == 0:  # n > 1 prefix-caching pass
            await self._emit(req.rid, "", prompt_words, FINISH_LENGTH(length=0).to_json(), 0)
            return
        stops = [s for s in (req.sampling_params.stop_strs or []) if s]
        emitted = ""
        try:
            steps = self.script(req.input_text, request_json)
        except Exception as exc:  # a broken script is a test bug: finish with a 500 abort
            self.counts["script_errors"] += 1
            reason = FINISH_ABORT(message=f"script raised {exc!r}", status_code=500).to_json()
            await self._emit(req.rid, "", prompt_words, reason, 0)
            return
        for step in steps:
            if "sleep" in step:
                await asyncio.sleep(float(step["sleep"]))
            elif "gate" in step:  # test-only: hold until that many requests were live at once
                await self._gate(int(step["gate"]))
            elif "text" in step:
                for piece in _chunks(step["text"], 3 if req.stream else 1):
                    hit = _first_stop(emitted + piece, stops)
                    if hit is not None:
                        cut, stop = hit
                        piece = (emitted + piece)[:cut][len(emitted) :]
                        emitted += piece
                        reason = FINISH_MATCHED_STR(matched=stop).to_json()
                        await self._emit(req.rid, piece, prompt_words, reason, len(emitted.split()))
                        return
                    emitted += piece
                    await self._emit(req.rid, piece, prompt_words, None, len(emitted.split()))
                    if req.stream:  # each piece its own chunk, whatever the machine's load
                        await self._drained(req.rid)
            elif "abort" in step:
                reason = FINISH_ABORT(
                    message=step.get("message", "Aborted (scripted)"), status_code=step["abort"]
                ).to_json()
                if step.get("via") == "abort_req":
                    self._abort_in_scheduler(req.rid, reason)
                else:
                    await self._emit(req.rid, "", prompt_words, reason, len(emitted.split()))
                return
            else:
                raise ValueError(f"unknown script step {step!r}")
        reason = FINISH_MATCHED_TOKEN(matched=EOS_TOKEN_ID).to_json()
        await self._emit(req.rid, "", prompt_words, reason, len(emitted.split()))


def ipc_round_trip(obj):
    """What crossing upstream's scheduler/detokenizer -> tokenizer-manager IPC does to ``obj``:
    pickle (SGLANG_USE_PICKLE_IPC=1, the default) or upstream's msgpack codec (=0), which for
    example turns an HTTPStatus inside a finish reason into a plain int."""
    from sglang.srt.managers import io_struct

    if io_struct._USE_PICKLE_IPC:
        return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    return io_struct.msgpack_decode(io_struct.msgpack_encode(obj))


def _chunks(text: str, n: int) -> list[str]:
    pieces = TOKEN.findall(text)
    if n <= 1 or len(pieces) <= 1:
        return [text] if text else []
    size = max(1, -(-len(pieces) // n))
    return ["".join(pieces[i : i + size]) for i in range(0, len(pieces), size)]


def _first_stop(text: str, stops: list[str]):
    hits = [(text.find(s), s) for s in stops if s in text]
    return min(hits) if hits else None


@functools.cache
def _optional_output_fields() -> tuple[str, ...]:
    """BatchStrOutput's required fields the scripted scheduler leaves empty (None)."""
    import msgspec
    from sglang.srt.managers.io_struct import BatchStrOutput

    given = {
        "rids", "http_worker_ipcs", "finished_reasons", "output_strs", "output_ids", "prompt_tokens",
        "completion_tokens", "reasoning_tokens", "cached_tokens", "retraction_counts",
    }  # fmt: skip
    return tuple(f.name for f in msgspec.structs.fields(BatchStrOutput) if f.name not in given and f.required)
