"""sglang < 0.5.23: ``bootstrap.init_torch_distributed(*, server_args, ...)`` gets the shared AFTER hook.

Invariant: upstream's result is returned unchanged; the exchange runs once per rank. Cost: the exchange's.
"""

from sglang_overlay.patches.cluster_consistency.exchange import after_group_init as after_torch_distributed

__all__ = ["after_torch_distributed"]
