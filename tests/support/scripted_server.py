"""A scripted OpenAI server for tests: upstream's own HTTP routes, a scripted model.

The server process (``python -m tests.support.scripted_server --script pkg.mod:fn``)
serves the installed upstream SGLang's FastAPI ``app`` from ``entrypoints/http_server.py``
(its ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models`` routes, with
``OpenAIServingChat`` / ``OpenAIServingCompletion`` installed on ``app.state`` the
way upstream's lifespan does) with uvicorn on 127.0.0.1. The overlay enters through
the real plugin path (``load_plugins()``); ``SGLANG_OVERLAY_DISABLE`` switches
patches off as in production.

What stands in for the GPU side, each piece named as such:

* ``ScriptedTokenizerManager`` (``scripted/manager.py``) -- a stand-in *subclass* of upstream's
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
* ``ScriptedScheduler`` (``scripted/scheduler.py``) -- runs the test's script per (sub-)request and feeds the
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
* ``ScriptedWordTokenizer`` (``scripted/tokenizer.py``) -- a reversible tokenizer (runs of whitespace and of
  non-whitespace are tokens) whose chat template joins the messages' contents with
  newlines.

Script contract (see ``serve_openai``): ``fn(prompt_text, request_json) -> steps``
(plus a test-only step ``{"gate": n}``: hold until ``n`` request states were live at once),
called once per (sub-)request (n > 1: once per choice). Usage token counts are
whitespace-split word counts. ``GET /_scripted/stats`` (test-only) reports the live
``rid_to_state`` count, its peak, running scripts, aborts received, and the
overlay's ``application.status()`` in the server process.

This module is the test side (``serve_openai``) and the server process's entry point (``main``, over
``scripted/app.py``); the stand-ins' names are re-exported here. Invariant: the server subprocess is stopped
(SIGTERM, then SIGKILL) when ``serve_openai`` exits. Cost: a start-up is an upstream import in a subprocess
(seconds); readiness polls ``/v1/models`` every 0.1 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from tests.support.scripted.app import STATS_PATH, build_app, load_script
from tests.support.scripted.manager import make_tokenizer_manager_class
from tests.support.scripted.scheduler import ScriptedScheduler, ipc_round_trip
from tests.support.scripted.tokenizer import EOS_TOKEN_ID, ScriptedTokenizedRequest, ScriptedWordTokenizer

__all__ = [
    "EOS_TOKEN_ID", "REPO", "STATS_PATH", "ScriptedScheduler", "ScriptedServerHandle", "ScriptedTokenizedRequest",
    "ScriptedWordTokenizer", "build_app", "ipc_round_trip", "load_script", "main", "make_tokenizer_manager_class",
    "serve_openai",
]  # fmt: skip

REPO = Path(__file__).resolve().parents[2]


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


# --------------------------------------------------------------------------- server process


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
