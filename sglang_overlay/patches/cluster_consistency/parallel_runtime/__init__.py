"""Serves sglang >=0.5.23 (the pin 0.5.23): release folder ``parallel_runtime/`` of cluster-consistency.

The design it serves: the scheduler builds its groups in ``bootstrap.init_parallel_runtime``.

``hook.py``: after it returns (every rank's default process group and store exist), the exchange.
"""

from sglang_overlay.core.registry import Release, Target

RELEASE = Release(
    ">=0.5.23",
    targets=(
        Target(
            "sglang.srt.distributed.bootstrap",
            "init_parallel_runtime",
            f"{__name__}.hook:after_parallel_runtime",
            "AFTER",
        ),
    ),
)
