"""cluster-consistency on sglang < 0.5.23: ``ModelRunner`` builds the groups in ``bootstrap.init_torch_distributed``.

``hook.py``: after it returns (every rank's default process group and store exist), the exchange.
"""

from sglang_overlay.core.registry import Release, Target

RELEASE = Release(
    "<0.5.23",
    targets=(
        Target(
            "sglang.srt.distributed.bootstrap",
            "init_torch_distributed",
            f"{__name__}.hook:after_torch_distributed",
            "AFTER",
        ),
    ),
)
