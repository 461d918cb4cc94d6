"""A scripted OpenAI server for tests: upstream's own HTTP routes, a scripted model.

The server process (``python -m tests.support.scripted_server --script pkg.mod:fn``)
serves the installed upstream SGLang's FastAPI ``app`` from ``entrypoints/http_server.py``
(its ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models`` routes, with
``OpenAIServingChat`` / ``OpenAIServingCompletion`` installed on ``app.state`` the
way upstream's lifespan does) with uvicorn on 127.0.0.1. The overlay enters through
the real plugin path (``load_plugins()``); ``SGLANG_OVERLAY_DISABLE`` switches
patches off as in production.

What stands in for the GPU side, each piece named as such:

* ``ScriptedTokenizerManager`` -- a stand-in *subclass* of upstream's
  ``TokenizerManager``. It runs upstream's ``__init__`` except the two steps that
  need a real tokenizer or ZMQ sockets (``init_tokenizer_and_processor``,
  ``init_ipc_channels``), and replaces only what would leave the process:
  ``auto_create_handle_loop`` (no detokenizer socket to poll),
  ``_tokenize_one_request`` (word tokenizer below), ``_send_one_request`` and
  ``_dispatch_to_scheduler`` (the scripted scheduler below). ``_init_req_state``
  is upstream's plus test bookkeeping (peak live states, the request JSON for the
  script). Everything else is upstream's code: ``generate_request``,
  ``_wait_one_response`` / ``_stream_one_response``, ``_handle_batch_request``
  (n > 1), ``_handle_batch_output``, ``_handle_abort_finish_reason``,
  ``abort_request``, ``_release_req_states_on_failure``, ``create_abort_task`` and
  the ``rid_to_state`` bookkeeping.
* ``ScriptedScheduler`` -- runs the test's script per (sub-)request and feeds the
  results back as upstream ``BatchStrOutput`` objects through the real
  ``TokenizerManager._handle_batch_output``; finish reasons are built with
  upstream's ``FINISH_MATCHED_STR`` / ``FINISH_MATCHED_TOKEN`` / ``FINISH_ABORT``.
  Every message first crosses upstream's IPC serialization (pickle, or upstream's
  msgpack codec under ``SGLANG_USE_PICKLE_IPC=0``), as between real processes.
  An abort step with ``"via": "abort_req"`` is answered the way the scheduler's
  timeout aborts are: an ``AbortReq`` echo with the finish reason, handled by
  upstream's ``_handle_abort_req``.
  An ``AbortReq`` from the tokenizer manager (client gone) cancels the script and
  answers with an abort finish, as the real scheduler does.
* ``ScriptedWordTokenizer`` -- a reversible tokenizer (runs of whitespace and of
  non-whitespace are tokens) whose chat template joins the messages' contents with
  newlines.

Script contract (see ``serve_openai``): ``fn(prompt_text, request_json) -> steps``
(plus a test-only step ``{"gate": n}``: hold until ``n`` request states were live at once),
called once per (sub-)request (n > 1: once per choice). Usage token counts are
whitespace-split word counts. ``GET /_scripted/stats`` (test-only) reports the live
``rid_to_state`` count, its peak, running scripts, aborts received, and the
overlay's ``application.status()`` in the server process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import dataclasses
import functools
import importlib
import os
import pickle
import re
import socket
import subprocess
import sys
import tempfile
import time
from array import array
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
STATS_PATH = "/_scripted/stats"
EOS_TOKEN_ID = 2


# --------------------------------------------------------------------------- test side


@dataclasses.dataclass
class ScriptedServerHandle:
    base_url: str
    process: subprocess.Popen
    log_path: Path

    def stats(self) -> dict:
        import httpx

        return httpx.get(self.base_url + STATS_PATH, timeout=10).json()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_idle(self, timeout_s: float = 30.0) -> dict:
        """Poll stats until no request state and no scripted work is left; returns the last stats."""
        deadline = time.monotonic() + timeout_s
        stats = self.stats()
        while time.monotonic() < deadline:
            if stats["live_request_states"] == 0 and stats["scheduler_running"] == 0:
                return stats
            time.sleep(0.05)
            stats = self.stats()
        return stats


def _subprocess_env(env: dict | None) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_")}
    base.pop("SGLANG_PLUGINS", None)
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), base.get("PYTHONPATH", "")]))
    base["HF_HUB_OFFLINE"] = "1"
    base["TRANSFORMERS_OFFLINE"] = "1"
    base.update(env or {})
    return base


@contextmanager
def serve_openai(
    script: str,
    *,
    env: dict | None = None,
    model_name: str = "scripted-model",
    startup_timeout_s: float = 60.0,
):
    """Run the scripted server in a subprocess; yield a ``ScriptedServerHandle``.

    ``script`` is ``"package.module:function"``, called in the server process per
    (sub-)request as ``function(prompt_text, request_json) -> list[step]`` where a
    step is ``{"text": str}``, ``{"sleep": seconds}`` or
    ``{"abort": status_code, "message": str}``. ``env`` is added to the child's
    environment (the parent's ``SGLANG_OVERLAY_*`` variables are not inherited).
    """
    import httpx

    workdir = Path(tempfile.mkdtemp(prefix="scripted-openai-"))
    port_file = workdir / "port"
    log_path = workdir / "server.log"
    cmd = [
        sys.executable, "-m", "tests.support.scripted_server",
        "--script", script, "--port", "0", "--port-file", str(port_file), "--model-name", model_name,
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, cwd=str(REPO), env=_subprocess_env(env), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + startup_timeout_s
        base_url = None
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"scripted server exited with {process.returncode} during start-up:\n"
                    + log_path.read_text(errors="replace")[-6000:]
                )
            if base_url is None and port_file.exists() and port_file.read_text().strip():
                base_url = f"http://127.0.0.1:{int(port_file.read_text())}"
            if base_url is not None:
                try:
                    if httpx.get(base_url + "/v1/models", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        else:
            raise TimeoutError(
                f"scripted server not answering after {startup_timeout_s}s:\n"
                + log_path.read_text(errors="replace")[-6000:]
            )
        yield ScriptedServerHandle(base_url=base_url, process=process, log_path=log_path)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# --------------------------------------------------------------------------- server side


def load_script(spec: str) -> Callable:
    module_name, _, func_name = spec.partition(":")
    if not module_name or not func_name:
        raise ValueError(f"--script {spec!r}: expected 'package.module:function'")
    obj = importlib.import_module(module_name)
    for part in func_name.split("."):
        obj = getattr(obj, part)
    return obj


_TOKEN = re.compile(r"\s+|\S+")


class ScriptedWordTokenizer:
    """Stand-in tokenizer: runs of whitespace and of non-whitespace are tokens (reversible)."""

    chat_template = "scripted: message contents joined with newlines"
    bos_token_id = None
    eos_token_id = EOS_TOKEN_ID
    eos_token = "</s>"
    pad_token_id = 0
    additional_stop_token_ids = None

    def __init__(self):
        self._ids: dict[str, int] = {}
        self._pieces: list[str] = ["<pad>", "<s>", "</s>"]

    def encode(self, text: str, **_kwargs) -> list[int]:
        ids = []
        for piece in _TOKEN.findall(text):
            if piece not in self._ids:
                self._ids[piece] = len(self._pieces)
                self._pieces.append(piece)
            ids.append(self._ids[piece])
        return ids

    def __call__(self, text, **kwargs):
        if isinstance(text, list):
            return {"input_ids": [self.encode(t) for t in text]}
        return {"input_ids": self.encode(text)}

    def decode(self, ids, **_kwargs) -> str:
        return "".join(self._pieces[i] for i in ids if i > 2)

    def convert_ids_to_tokens(self, ids):
        return [self._pieces[i] for i in ids]

    @staticmethod
    def render(messages) -> str:
        parts = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else message.content
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(content or "")
        return "\n".join(parts)

    def apply_chat_template(self, messages, tokenize=True, **_kwargs):
        text = self.render(messages)
        return self.encode(text) if tokenize else text


@dataclasses.dataclass
class ScriptedTokenizedRequest:
    """What the stand-in tokenizer hands the scripted scheduler (the fields upstream's batch path touches)."""

    rid: str
    input_text: str
    input_ids: list
    sampling_params: object  # upstream SamplingParams
    stream: bool
    time_stats: object = None
    mm_inputs: object = None


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
    pieces = _TOKEN.findall(text)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--model-name", default="scripted-model")
    args = parser.parse_args(argv)

    from sglang.srt.plugins import load_plugins

    load_plugins()  # the overlay's real entry point (SGLANG_OVERLAY_DISABLE applies)
    import uvicorn

    app, _manager = build_app(load_script(args.script), args.model_name)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", log_level="warning", timeout_keep_alive=30)
    server = uvicorn.Server(config)
    if args.port_file:
        Path(args.port_file).write_text(str(port))
    print(f"scripted OpenAI server on http://127.0.0.1:{port}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
