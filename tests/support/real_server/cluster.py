"""Several ranks on this host: ``--tp-size 2`` on one node (``tensor_parallel``), and two SGLang nodes on loopback
(``two_nodes``: ``--tp-size 2 --nnodes 2``, one rank per node).

Usage::

    with two_nodes(tmp_path, node1=ServerConfig(overlay=False)) as (node0, node1):
        ...  # node0: a ready RealServer (it serves the API); node1: its process (a health server only)

Settings from ``shared/notes/users-environments.md``: one core per rank (``SGLANG_CPU_OMP_THREADS_BIND``), torch.compile
off (``EAGER``), NCCL kept out (``SGLANG_NCCL_SO_PATH`` naming no file: the registry's torch is a CUDA build whose PyNccl would ask
for a CUDA device), a different ``--port`` per node (a non-zero node rank serves a small health server there).
Invariant: both launches are stopped whole on exit, whatever happened. Cost: about a minute to ready on 2 cores.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import uuid
from contextlib import contextmanager
from pathlib import Path

from tests.support.env import overlay_cwd
from tests.support.real_server.model import build_tiny_model
from tests.support.real_server.server import RealServer, ServerConfig, free_port, start_server

NCCL_OFF = ("SGLANG_NCCL_SO_PATH", "/nonexistent/libnccl.so.2")
# With more than one rank, upstream's vocab-parallel embedding runs a torch.compile'd mask (layers/
# vocab_parallel_embedding.py, get_masked_input_and_mask): its first call builds an inductor C++ kernel, 11 s
# on 2 loaded cores, past the abort configs' 4 s running timeout (their warm-up request was refused). Eager, the
# same pointwise ops; both sides of every comparison run the same way.
EAGER = ("TORCHDYNAMO_DISABLE", "1")


def tensor_parallel(base: ServerConfig, tp_size: int = 2) -> ServerConfig:
    """``base`` as a ``--tp-size`` server on this host: one core per rank, NCCL kept out."""
    binds = ("SGLANG_CPU_OMP_THREADS_BIND", "|".join(str(i) for i in range(tp_size)))
    return dataclasses.replace(base, extra_args=base.extra_args + ("--tp-size", str(tp_size)),
                               env=base.env + (NCCL_OFF, EAGER, binds))  # fmt: skip


def node_config(base: ServerConfig, node_rank: int, dist_port: int) -> ServerConfig:
    args = ("--tp-size", "2", "--nnodes", "2", "--node-rank", str(node_rank), "--dist-init-addr",
            f"127.0.0.1:{dist_port}")  # fmt: skip
    env = (("SGLANG_CPU_OMP_THREADS_BIND", str(node_rank)), NCCL_OFF, EAGER)
    return dataclasses.replace(base, extra_args=base.extra_args + args, env=base.env + env)


@contextmanager
def two_nodes(log_dir: Path, node0: ServerConfig = ServerConfig(), node1: ServerConfig = ServerConfig(),
              timeout_s: float = 300.0):  # fmt: skip
    """Node 1 launched first (it waits for the rendezvous), then node 0 started and waited for: yields both
    (node 0's ``start_server`` raises ``ServerStartError`` with its log when it does not start)."""
    model_dir = build_tiny_model()
    dist_port = free_port()
    config1 = node_config(node1, 1, dist_port)
    port1, launch_id = free_port(), uuid.uuid4().hex
    log1 = Path(log_dir) / "node1" / f"{config1.name}-{port1}.log"
    log1.parent.mkdir(parents=True, exist_ok=True)
    with log1.open("wb") as log:
        proc = subprocess.Popen(config1.command(model_dir, port1), cwd=overlay_cwd(),
                                env=config1.environment(launch_id), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    second = RealServer(config1, port1, proc, log1, launch_id)
    first = None
    try:
        first = start_server(node_config(node0, 0, dist_port), Path(log_dir) / "node0", model_dir, timeout_s)
        yield first, second
    finally:
        if first is not None:
            first.stop()
        second.stop()


CHECKED = re.compile(r"cluster of \d+ ranks consistent \(rank (\d+), node (\d+); checked in ([\d.]+) s\)")


def cluster_checks(log: str) -> list[tuple[int, int, float]]:
    """(rank, node, seconds) of each ``cluster-consistency`` INFO line in a launch's log."""
    return [(int(rank), int(node), float(sec)) for rank, node, sec in CHECKED.findall(log)]


def node0_log(log_dir: Path) -> str:
    """Node 0's log (the last launch's), for a launch that did not start."""
    logs = sorted((Path(log_dir) / "node0").glob("*.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1].read_text(encoding="utf-8", errors="replace") if logs else ""
