"""CPU-only try-out: a patched server on the tiny offline model, its URL and per-process status, until Ctrl-C.

Run from a checkout (``.venv/bin/python scripts/demo.py [--model tiny|smollm2-135m] [--ask QUESTION]
[--tokenizer-worker-num N] [--log-dir DIR]``): the CPU stand-ins for ``sgl_kernel`` and the model builders are
the test tooling's (``tests/support``), never part of what a GPU user installs. ``--model smollm2-135m``
serves a real model (SmolLM2-135M-Instruct, built by ``scripts/real_model.py``); ``--ask`` prints the
model's answer to one question and the per-process status, then stops the server (for scripts and CI).
On a GPU host: ``sglang-overlay launch --model-path ...``.

Invariants: Ctrl-C (or SIGTERM) stops the launch whole, even a second Ctrl-C during the stop; nothing of
the launch is left. Cost: one real server start (40-120 s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sglang_overlay.cli.render import console, err_console  # noqa: E402
from sglang_overlay.cli.status import run_status  # noqa: E402
from tests.support.real_server import server as server_tools  # noqa: E402
from tests.support.real_server import smollm2  # noqa: E402
from tests.support.real_server.model import build_tiny_model  # noqa: E402

MODELS = {
    "tiny": "the tiny random-weight model, so answers are noise",
    smollm2.NAME: "SmolLM2-135M-Instruct (Apache-2.0)",
}


def ask(url: str, question: str, max_tokens: int = 96) -> str:
    """One greedy chat turn; the model's reply."""
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as reply:
        model = json.load(reply)["data"][0]["id"]
    body = {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": max_tokens}
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps({**body, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as reply:
        return json.load(reply)["choices"][0]["message"]["content"]


def run_demo(tokenizer_workers: int, log_dir: str | None, model: str = "tiny", question: str | None = None) -> int:
    logs = Path(log_dir or tempfile.mkdtemp(prefix="sglang-overlay-demo-"))
    console.print(f"building or finding the model ({model}) and starting a patched server (log: {logs}) ...")
    try:
        model_dir = smollm2.build_real_model() if model == smollm2.NAME else build_tiny_model()
    except smollm2.RealModelError as exc:
        err_console.print(f"[red]demo: {exc}[/red]")
        return 2
    config = server_tools.ServerConfig(overlay=True, launcher="overlay", tokenizer_workers=tokenizer_workers)

    def interrupt(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # like Ctrl-C: the launch is stopped whole, never orphaned
    try:
        server = server_tools.start_server(config, logs, model_dir=model_dir)
    except server_tools.ServerStartError as exc:
        err_console.print(f"[red]demo: the server did not start: {exc}[/red]")
        return 1
    except KeyboardInterrupt:  # start_server has stopped the launch already
        console.print("interrupted while starting; server stopped")
        return 130
    try:
        console.print(
            f"[green]serving at {server.url}[/] (ready in {server.time_to_ready:.0f} s; OpenAI API at "
            f"{server.url}/v1, model: {MODELS[model]})"
        )
        if question is not None:
            answer = ask(server.url, question)
            console.print(f"Q: {question}")
            console.print(f"A: {answer.strip()}", markup=False)
            return run_status(server.url, as_json=False)  # 0 only when every process has the overlay
        run_status(server.url, as_json=False)
        with urllib.request.urlopen(f"{server.url}/v1/models", timeout=30) as reply:
            model_id = json.load(reply)["data"][0]["id"]
        body = json.dumps({"model": model_id, "prompt": "Question: 2+2?", "max_tokens": 8})
        console.print(f"try: curl {server.url}/v1/completions -H 'Content-Type: application/json' -d '{body}'")
        console.print("Ctrl-C stops the server")
        while server.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        left = server.stop()
        console.print(f"server stopped{'; killed leftovers ' + str(left) if left else ''}")
    return 0 if server.process.returncode in (0, -15, -2, -9, None) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer-worker-num", type=int, default=1, help="SGLang's tokenizer workers (default 1)")
    parser.add_argument("--log-dir", help="where the server log goes (default: a new temporary folder)")
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny", help="tiny: random weights, fastest")
    parser.add_argument("--ask", metavar="QUESTION", help="print the answer and the status, then stop the server")
    args = parser.parse_args(argv)
    return run_demo(args.tokenizer_worker_num, args.log_dir, args.model, args.ask)


if __name__ == "__main__":
    sys.exit(main())
