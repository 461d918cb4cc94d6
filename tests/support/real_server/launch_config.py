"""How a real SGLang server is launched: ``ServerConfig`` builds its command line and its environment.

A launch is ``sglang-overlay launch ...`` (``launcher="overlay"``) or ``python -m sglang.launch_server ...``
(``launcher="sglang"``), with ``SGLANG_USE_CPU_ENGINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1``, the CPU flags
of ``CPU_FLAGS`` and ``standins/`` first on ``PYTHONPATH`` (the ``sgl_kernel`` stand-in and the ``cpu_standins``
plugin). ``SGLANG_PLUGINS`` is ``cpu_standins,sglang_overlay`` for the overlay and ``cpu_standins`` for pure
upstream, so both sides carry the same stand-ins. Every process of a launch inherits
``SGLANG_OVERLAY_TEST_SERVER=<launch id>`` (``LAUNCH_ID_ENV``).

Invariant: a ``ServerConfig`` is frozen and hashable (configs key the pools), and refuses an impossible
combination at construction. Cost: none (building lists and dicts).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.env import overlay_path

STANDINS = Path(__file__).resolve().parent / "standins"
VENV_BIN = Path(sys.executable).parent
STANDIN_PLUGIN = "cpu_standins"
OVERLAY_PLUGIN = "sglang_overlay"
LAUNCH_ID_ENV = "SGLANG_OVERLAY_TEST_SERVER"

CPU_FLAGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--sampling-backend",
    "pytorch",
    "--disable-cuda-graph",
    "--disable-overlap-schedule",
    "--sleep-on-idle",
    # --max-total-tokens below caps the KV cache, so this fraction only sets when upstream refuses to start: when
    # the memory that went away while the weights loaded passes 1 - it of what was free before. On a shared host
    # that is every other process's allocations too (0.05 refused a tokenizer-worker server of the wheel's tier
    # while the pin's two-node servers started beside it: 0.068 needed), so the refusal is left to a real shortage.
    "--mem-fraction-static",
    "0.9",
    "--max-total-tokens",
    "8192",
)
# Real scheduler-side error-status aborts, reachable on demand (see tests/e2e/test_abort_matrix.py):
# a request with a priority is refused with 503 (scheduler.py:3229-3256), a full waiting queue refuses
# with 503 (scheduler.py:3258-3297), a request running longer than the timeout ends with 503
# (SGLANG_REQ_RUNNING_TIMEOUT, scheduler.py:3299-3353 and abort_request :5363-5369).
RUNNING_TIMEOUT_S = 4.0
ABORT_FLAGS = (
    "--max-running-requests",
    "2",
    "--max-queued-requests",
    "1",
    "--abort-on-priority-when-disabled",
)
HICACHE_FLAGS = (
    "--enable-hierarchical-cache",
    "--hicache-io-backend",
    "direct",
    "--hicache-mem-layout",
    "layer_first",
)


@dataclass(frozen=True)
class ServerConfig:
    """One way to launch the server. ``overlay=False`` is pure upstream (always through SGLang's launcher)."""

    overlay: bool = True
    launcher: str = "sglang"  # "overlay": sglang-overlay launch; "sglang": python -m sglang.launch_server
    ipc: str = "pickle"  # "pickle" or "msgpack" (SGLANG_USE_PICKLE_IPC)
    tokenizer_workers: int = 1
    abort_triggers: bool = False  # ABORT_FLAGS + SGLANG_REQ_RUNNING_TIMEOUT
    hicache: bool = False
    max_running_requests: int = 8
    extra_args: tuple = ()
    env: tuple = ()  # (("NAME", "value"), ...): hashable, so configs can key a cache
    api_key: str | None = None  # --api-key: every request but upstream's exemptions must carry it
    pythonpath_first: tuple = ()  # directories before everything else (e.g. another checkout of the overlay)

    def __post_init__(self):
        if self.launcher not in ("overlay", "sglang"):
            raise ValueError(f"launcher must be 'overlay' or 'sglang', not {self.launcher!r}")
        if self.ipc not in ("pickle", "msgpack"):
            raise ValueError(f"ipc must be 'pickle' or 'msgpack', not {self.ipc!r}")
        if self.launcher == "overlay" and not self.overlay:
            raise ValueError("sglang-overlay launch refuses a server without the overlay: use launcher='sglang'")

    @property
    def name(self) -> str:
        parts = ["overlay" if self.overlay else "upstream", self.ipc, f"w{self.tokenizer_workers}"]
        if self.launcher == "overlay":
            parts.append("cli")
        if self.abort_triggers:
            parts.append("aborts")
        if self.hicache:
            parts.append("hicache")
        if self.api_key:
            parts.append("key")
        if "--tp-size" in self.extra_args:
            parts.append("tp" + self.extra_args[self.extra_args.index("--tp-size") + 1])
        return "-".join(parts)

    def server_args(self, model_dir: Path, port: int) -> list[str]:
        args = ["--model-path", str(model_dir), "--host", "127.0.0.1", "--port", str(port), *CPU_FLAGS]
        if self.abort_triggers:
            args += ABORT_FLAGS
        else:
            args += ["--max-running-requests", str(self.max_running_requests)]
        if self.tokenizer_workers > 1:
            args += ["--tokenizer-worker-num", str(self.tokenizer_workers)]
        if self.hicache:
            args += HICACHE_FLAGS
        if self.api_key:
            args += ["--api-key", self.api_key]
        return args + list(self.extra_args)

    def command(self, model_dir: Path, port: int) -> list[str]:
        if self.launcher == "overlay":
            head = [str(VENV_BIN / "sglang-overlay"), "launch"]
        else:
            head = [sys.executable, "-m", "sglang.launch_server"]
        return head + self.server_args(model_dir, port)

    def environment(self, launch_id: str) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [*self.pythonpath_first, str(STANDINS), *overlay_path(), os.environ.get("PYTHONPATH", "")])
        )
        env.update(
            SGLANG_USE_CPU_ENGINE="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            SGLANG_USE_PICKLE_IPC="1" if self.ipc == "pickle" else "0",
            SGLANG_PLUGINS=f"{STANDIN_PLUGIN},{OVERLAY_PLUGIN}" if self.overlay else STANDIN_PLUGIN,
            PYTHONUNBUFFERED="1",
            # uvicorn pings each tokenizer worker and kills one that does not answer in 10 s (SGLang's default);
            # a worker importing sglang on 2 loaded cores misses that, upstream and overlay alike (one death on
            # each side in a back-to-back control run). SGLang's own knob gives them time; it changes nothing else.
            SGLANG_UVICORN_WORKER_HEALTHCHECK_TIMEOUT="120",
        )
        env[LAUNCH_ID_ENV] = launch_id
        if self.abort_triggers:
            env["SGLANG_REQ_RUNNING_TIMEOUT"] = str(RUNNING_TIMEOUT_S)
        env.update(dict(self.env))
        return env
