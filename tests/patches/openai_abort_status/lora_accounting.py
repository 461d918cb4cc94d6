"""LoRA reference accounting of aborted requests, run in a fresh interpreter (test_lora_release.py).

``python -m tests.patches.openai_abort_status.lora_accounting`` publishes a tokenizer-role runtime
with one LoRA adapter (``--lora-paths adapter=...``: upstream's own ``LoRARegistry`` with its
``ConcurrentCounter`` per adapter; no weights are read in the tokenizer process), loads the overlay
through the real plugin path (``SGLANG_OVERLAY_DISABLE`` applies), and drives upstream's
``TokenizerManager.generate_request`` of the scripted tokenizer manager
(``tests/support/scripted_server.py``) once per case: every abort code of
``tests/support/abort_scripts.py``, streaming or not, finished by a batch output
(``_handle_batch_output``) or by the scheduler's abort echo (``_handle_abort_req``). After each
request has settled (the release ``_handle_batch_output`` schedules as a task included) it records
what the request left on the adapter's usage count: 0 when it released its reference exactly once.
Prints one JSON object: ``{"<key>/<via>/<stream|non_stream>": {"count": int, "outcome": str}}``;
:func:`run_accounting` is the tests' side (it runs this module and reads that line).
"""

from __future__ import annotations

import asyncio
import json

ADAPTER = "adapter"
FINISHED = "finished"  # no abort: the request finishes normally
VIAS = ("output", "abort_req")
MODES = ("non_stream", "stream")


def run_accounting(**env) -> dict:
    """Run this module in a fresh interpreter (the overlay under test, ``env`` added); its one JSON line."""
    import subprocess
    import sys

    from tests.support.env import REPO, subprocess_env

    proc = subprocess.run(
        [sys.executable, "-m", "tests.patches.openai_abort_status.lora_accounting"],
        env=subprocess_env(**env), cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("LORA-ACCOUNTING ")]
    return json.loads(line[len("LORA-ACCOUNTING ") :])


def cases() -> list[tuple[str, str, bool]]:
    from tests.support.abort_scripts import ABORT_CODES

    aborts = [
        (key, via, stream) for key in sorted(ABORT_CODES) for via in ("output", "abort_req") for stream in (False, True)
    ]
    return [(FINISHED, "output", False), (FINISHED, "output", True)] + aborts


async def _settle(manager) -> None:
    """Until the scripted scheduler is idle and the tasks this loop scheduled (releases) ran."""
    for _ in range(200):
        await asyncio.sleep(0)
        if not manager.scheduler.tasks and not manager.rid_to_state:
            break
    for _ in range(20):
        await asyncio.sleep(0)


async def _one(manager, key: str, via: str, stream: bool) -> dict:
    from fastapi import HTTPException
    from sglang.srt.managers.io_struct import GenerateReqInput

    prompt = "hello" if key == FINISHED else f"abort={key} after=1 wait=0 via={via}"
    obj = GenerateReqInput(
        text=prompt, lora_path=ADAPTER, stream=stream,
        sampling_params={"max_new_tokens": 8},
    )  # fmt: skip
    lora_id = manager.lora_registry._registry[ADAPTER].lora_id
    counter = manager.lora_registry._counters[lora_id]
    before = counter.value()
    outcome = "finished"
    try:
        async for out in manager.generate_request(obj, None):
            reason = out["meta_info"].get("finish_reason") or {}
            if reason.get("type") == "abort":
                outcome = f"abort {reason.get('status_code')!s}"
    except HTTPException as exc:
        outcome = f"HTTPException {exc.status_code}"
    except ValueError:
        outcome = "ValueError"
    await _settle(manager)
    return {"count": counter.value() - before, "outcome": outcome}


def publish_with_lora():
    """The tiny CPU config with one adapter, validated and published in upstream's launch order
    (``Engine._launch_subprocesses``: ``resolve_once()``, ``check_server_args()``, which
    normalizes the adapter paths, then ``publish``)."""
    import os

    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    from tests.support.runtime import tiny_model_dir

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    server_args = ServerArgs(
        model_path=str(tiny_model_dir()), device="cpu", skip_tokenizer_init=True, served_model_name="scripted-model",
        lora_paths=[f"{ADAPTER}=/nonexistent/{ADAPTER}"],
    )  # fmt: skip
    server_args.resolve_once()
    server_args.check_server_args()
    publish(server_args, role="tokenizer")
    return server_args


async def run() -> dict:
    from tests.support.abort_scripts import dispatch
    from tests.support.scripted_server import make_tokenizer_manager_class

    server_args = publish_with_lora()
    manager = make_tokenizer_manager_class()(server_args, dispatch)
    assert manager.enable_lora
    results = {}
    for key, via, stream in cases():
        results[f"{key}/{via}/{'stream' if stream else 'non_stream'}"] = await _one(manager, key, via, stream)
    return results


def main() -> None:
    from sglang.srt.plugins import load_plugins

    load_plugins()  # the overlay's real entry point
    print("LORA-ACCOUNTING " + json.dumps(asyncio.run(run()), sort_keys=True))


if __name__ == "__main__":
    main()
