"""Launch a real SGLang server (the installed pin) on the CPU (127.0.0.1, a free port), wait until it serves, stop it whole.

Usage (a context manager; ``tests/e2e/conftest.py`` wraps it in fixtures, ``scripts/demo.py`` reuses it)::

    from tests.support.real_server.server import ServerConfig, running_server
    with running_server(ServerConfig(overlay=True, launcher="overlay"), log_dir=tmp) as srv:
        httpx.get(f"{srv.url}/v1/models")

What a launch is: ``sglang-overlay launch ...`` (``launcher="overlay"``) or ``python -m sglang.launch_server
...`` (``launcher="sglang"``), with ``SGLANG_USE_CPU_ENGINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1``, the
CPU flags of ``CPU_FLAGS`` (``--disable-overlap-schedule`` matters: 20x the decode rate on 2 cores;
``--sleep-on-idle`` too: an idle scheduler otherwise spins a core, measured 99.4% against 1.0% with it, so the
pool's other live servers starved the one under test on 2 cores and timing probes missed their window), the tiny
offline model (``model.py``) and ``standins/`` first on ``PYTHONPATH`` (the ``sgl_kernel`` stand-in and the
``cpu_standins`` plugin). ``SGLANG_PLUGINS`` is ``cpu_standins,sglang_overlay`` for the overlay and
``cpu_standins`` for pure upstream, so both sides carry the same stand-ins.

Invariants: the server runs in a new session (its own process group); ``stop()`` sends SIGTERM to the group,
then SIGKILL, then kills by pid any descendant that left the group, and reports survivors (``orphans``): after
``stop()`` no process of this launch is alive. Start-up failures raise ``ServerStartError`` with the log tail
as soon as the process dies (never a silent wait to the timeout); an HTTP port another process took before
uvicorn bound it (``PortTaken``) is retried on a new port, ``PORT_ATTEMPTS`` launches in all. Every
process of a launch inherits ``SGLANG_OVERLAY_TEST_SERVER=<launch id>``, so leftovers that left the group can
be found by environment (SGLang's ``setproctitle`` hides the environment of renamed processes such as ``sglang::scheduler``: those
are covered by the group kill and by the pid snapshot ``stop()`` takes first).
Cost: a launch is 20-40 s to ready on 2 warm cores (90-120 s cold); polling is one HTTP request per 0.5 s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.env import overlay_cwd, overlay_path, subprocess_env
from tests.support.real_server.model import build_tiny_model

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
    "--mem-fraction-static",
    "0.05",
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


class ServerStartError(RuntimeError):
    """The server died or never became ready; the message ends with its log tail."""


class PortTaken(ServerStartError):
    """Another process bound the HTTP port between ``free_port()`` and uvicorn's bind (SGLang picks its
    internal ports at random too); uvicorn then waits for shutdown instead of exiting. Retried on a new port."""


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


def run_status(url: str, *extra: str, **env: str) -> subprocess.CompletedProcess:
    """``sglang-overlay status --url URL`` as an operator runs it (this environment's console script, reading
    with the overlay under test: the checkout's, unless the installed one is under test); ``env`` added."""
    return subprocess.run([str(VENV_BIN / "sglang-overlay"), "status", "--url", url, *extra], capture_output=True,
                          text=True, timeout=120, env=subprocess_env(**env))  # fmt: skip


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_block(count: int) -> int:
    """A port ``p`` with ``p .. p + count - 1`` all free now: SGLang derives its ZMQ ports from some ports
    (DP attention: ``--dist-init-addr``'s port + 1 .. + 6) and waits 30 s, then fails, on a taken one."""
    for _ in range(200):
        base = free_port()
        if base + count > 65535:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)).bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise RuntimeError(f"no block of {count} free ports found on 127.0.0.1")


@dataclass
class RealServer:
    """A launched server: its URL, root process, log and the seconds it took to be ready."""

    config: ServerConfig
    port: int
    process: subprocess.Popen
    log_path: Path
    launch_id: str
    time_to_ready: float = 0.0
    orphans: list = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def processes(self) -> list:
        """The root process and every live descendant (psutil.Process objects)."""
        import psutil

        try:
            root = psutil.Process(self.pid)
            return [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def tokenizer_workers(self) -> list:
        """The live processes titled ``sglang::tokenizer_worker:<pid>`` (set in ``TokenizerWorker.__init__``)."""
        found = []
        for proc in self.processes():
            try:
                if "tokenizer_worker" in " ".join(proc.cmdline()):
                    found.append(proc)
            except Exception:  # psutil.Error: the process went between listing and reading
                continue
        return found

    def stop(self, grace_s: float = 20.0) -> list[int]:
        """Stop the whole launch; returns (and records) pids that had to be killed outside the group."""
        known = {p.pid for p in self.processes()}
        if self.process.poll() is None:
            _signal_group(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.wait(timeout=10)
        self.orphans = _kill_leftovers(self.launch_id, known)
        return self.orphans


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def launch_processes(launch_id: str) -> list:
    """Live processes whose environment carries this launch id (wherever they ended up)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(LAUNCH_ID_ENV) == launch_id:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _alive(pid: int):
    import psutil

    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc
    except psutil.Error:
        return None


def _kill_leftovers(launch_id: str, known: set[int]) -> list[int]:
    """Wait up to 10 s for the launch's processes to go, then kill the survivors by pid; returns their pids."""
    import psutil

    deadline = time.monotonic() + 10
    while True:
        pids = {p.pid for p in launch_processes(launch_id)} | set(known)
        alive = [proc for proc in map(_alive, sorted(pids)) if proc is not None]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return sorted(p.pid for p in alive)


WORKER_DIED = "Child process ["  # uvicorn's supervisor: "Child process [PID] died" (it then respawns)
MAX_WORKER_DEATHS = 3
PORT_ATTEMPTS = 3


def _wait_ready(server: RealServer, timeout_s: float, poll_s: float = 0.5) -> None:
    """Poll until ready; fail at once when the root process exits or tokenizer workers keep dying.

    Ready means ``/health`` and ``/v1/models`` answer and, with ``--tokenizer-worker-num N``, all N workers
    have entered ``TokenizerWorker.__init__``: one worker answers HTTP while uvicorn may still be spawning
    the next on loaded cores (CI saw a w2 server "ready" with one worker)."""
    start = time.monotonic()
    headers = {"Authorization": f"Bearer {server.config.api_key}"} if server.config.api_key else {}
    with httpx.Client(timeout=5.0, headers=headers) as client:
        while True:
            code = server.process.poll()
            if code is not None:
                raise ServerStartError(
                    f"server {server.config.name} exited with {code} before it was ready; "
                    f"log {server.log_path}:\n{server.log_tail()}"
                )
            log = server.log_text()
            if f"('127.0.0.1', {server.port}): address already in use" in log:
                raise PortTaken(
                    f"server {server.config.name}: port {server.port} was taken before uvicorn bound it; "
                    f"log {server.log_path}"
                )
            deaths = sum(1 for line in log.splitlines() if WORKER_DIED in line and "died" in line)
            if deaths >= MAX_WORKER_DEATHS:
                raise ServerStartError(
                    f"server {server.config.name}: {deaths} tokenizer workers died before it was "
                    f"ready (uvicorn respawns them forever); log {server.log_path}:\n{server.log_tail()}"
                )
            try:
                if (
                    client.get(f"{server.url}/health").status_code == 200
                    and client.get(f"{server.url}/v1/models").status_code == 200
                    and (
                        server.config.tokenizer_workers == 1
                        or len(server.tokenizer_workers()) >= server.config.tokenizer_workers
                    )
                ):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() - start > timeout_s:
                raise ServerStartError(
                    f"server {server.config.name} not ready after {timeout_s:.0f} s; "
                    f"log {server.log_path}:\n{server.log_tail()}"
                )
            time.sleep(poll_s)


def start_server(
    config: ServerConfig,
    log_dir: str | os.PathLike,
    model_dir: Path | None = None,
    timeout_s: float = 300.0,
    poll_s: float = 0.5,
) -> RealServer:
    """Launch and wait until ready; on failure the launch is stopped whole and ServerStartError raised.

    ``poll_s`` is the readiness poll interval, so also the resolution of ``time_to_ready``."""
    model_dir = Path(model_dir) if model_dir else build_tiny_model()
    for _ in range(PORT_ATTEMPTS - 1):
        try:
            return _start_once(config, Path(log_dir), model_dir, timeout_s, poll_s)
        except PortTaken:
            continue  # the launch was stopped whole; a new port
    return _start_once(config, Path(log_dir), model_dir, timeout_s, poll_s)


def _start_once(config: ServerConfig, log_dir: Path, model_dir: Path, timeout_s: float, poll_s: float) -> RealServer:
    port = free_port()
    launch_id = uuid.uuid4().hex
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{config.name}-{port}.log"
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(config.command(model_dir, port)) + "\n").encode())
        log.flush()
        started = time.monotonic()
        proc = subprocess.Popen(
            config.command(model_dir, port),
            cwd=overlay_cwd(),
            env=config.environment(launch_id),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = RealServer(config, port, proc, log_path, launch_id)
    try:
        _wait_ready(server, timeout_s, poll_s)
    except BaseException:
        server.stop(grace_s=5)
        raise
    server.time_to_ready = time.monotonic() - started
    return server


@contextmanager
def running_server(
    config: ServerConfig,
    log_dir: str | os.PathLike,
    model_dir: Path | None = None,
    timeout_s: float = 300.0,
    poll_s: float = 0.5,
):
    server = start_server(config, log_dir, model_dir, timeout_s, poll_s)
    try:
        yield server
    finally:
        server.stop()
