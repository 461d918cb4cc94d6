"""The scripted server's stand-in ``TokenizerManager``: upstream's request path, scripted tokenizer and scheduler.

``make_tokenizer_manager_class()`` builds ``ScriptedTokenizerManager``, a *subclass* of upstream's
``TokenizerManager``. It runs upstream's ``__init__`` except the two steps that need a real tokenizer or ZMQ
sockets (``init_tokenizer_and_processor``, ``init_ipc_channels``), and replaces only what would leave the
process: ``auto_create_handle_loop``, ``_tokenize_one_request`` (``ScriptedWordTokenizer``),
``_send_one_request`` and ``_dispatch_to_scheduler`` (``ScriptedScheduler``). ``_init_req_state`` is upstream's
plus test bookkeeping (peak live states, the request JSON for the script, carried in a context variable).

Invariant: everything else is upstream's code (``generate_request``, the waiters, ``_handle_batch_output``,
aborts, the ``rid_to_state`` bookkeeping). Cost: the class is built on call (imports upstream's tokenizer manager).
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Callable

from tests.support.scripted.scheduler import ScriptedScheduler
from tests.support.scripted.tokenizer import ScriptedTokenizedRequest, ScriptedWordTokenizer


def make_tokenizer_manager_class():
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    class ScriptedTokenizerManager(TokenizerManager):
        """Stand-in for TokenizerManager: upstream's request path, scripted tokenizer and scheduler."""

        def __init__(self, server_args, script: Callable):
            from sglang.srt.managers.tokenizer_manager import ServerStatus

            self.scheduler = ScriptedScheduler(self, script)
            self.peak_live_request_states = 0
            # Upstream's own __init__ (model config, running status, request logging, weight-update
            # lock, LoRA registry, metrics/watchdog, result dispatcher); the two init steps that
            # need a real tokenizer or ZMQ sockets are replaced below.
            super().__init__(server_args, port_args=None, start_pd_bootstrap_service=False)
            self.server_status = ServerStatus.Up

        def init_tokenizer_and_processor(self):
            self.tokenizer = ScriptedWordTokenizer()
            self.processor = self.mm_processor = None
            self.async_dynamic_batch_tokenizer = None

        def init_ipc_channels(self, port_args):
            self.recv_from_detokenizer = self.send_to_scheduler = None
            self.tokenizer_ipc_name = None
            self.load_snapshot_reader = None

        # -- what would leave the process ------------------------------------------------
        def auto_create_handle_loop(self):
            if self.event_loop is None:
                self.event_loop = asyncio.get_running_loop()

        async def _tokenize_one_request(self, obj):
            if obj.input_ids is not None:
                input_ids = list(obj.input_ids)
                text = self.tokenizer.decode(input_ids)
            else:
                text = obj.text
                input_ids = self.tokenizer.encode(text)
            params = self.sampling_params_class(**(obj.sampling_params or {}))
            params.normalize(self.tokenizer)
            state = self.rid_to_state[obj.rid]
            state.time_stats.set_tokenize_finish_time()
            return ScriptedTokenizedRequest(
                rid=obj.rid, input_text=text, input_ids=input_ids, sampling_params=params,
                stream=bool(obj.stream), time_stats=state.time_stats,
            )  # fmt: skip

        async def _send_one_request(self, tokenized_obj):
            self._mark_state_dispatched(tokenized_obj.rid)
            self.scheduler.submit(tokenized_obj, _REQUEST_JSON.get())

        def _dispatch_to_scheduler(self, obj):
            from sglang.srt.managers.io_struct import AbortReq

            if not isinstance(obj, AbortReq):
                raise TypeError(f"scripted scheduler cannot handle {type(obj).__name__}")
            self.scheduler.abort(obj.rid, obj.abort_all)

        # -- test bookkeeping around upstream's own state init --------------------------
        def _init_req_state(self, obj, request=None):
            super()._init_req_state(obj, request)
            self.peak_live_request_states = max(self.peak_live_request_states, len(self.rid_to_state))
            if request is not None:  # n > 1 sub-requests come without it, in the same task
                _REQUEST_JSON.set(_request_json(request))

        def stats(self) -> dict:
            return {
                "live_request_states": len(self.rid_to_state),
                "live_rids": sorted(self.rid_to_state)[:20],
                "peak_live_request_states": self.peak_live_request_states,
                "scheduler_running": len(self.scheduler.tasks),
                **self.scheduler.counts,
            }

    return ScriptedTokenizerManager


_REQUEST_JSON: "contextvars.ContextVar[dict]" = contextvars.ContextVar("scripted_request_json", default={})


def _request_json(request) -> dict:
    if request is None:
        return {}
    body = getattr(request, "_json", None)
    if body is None and getattr(request, "_body", None):
        import orjson

        try:
            body = orjson.loads(request._body)
        except orjson.JSONDecodeError:
            body = None
    return body if isinstance(body, dict) else {}
