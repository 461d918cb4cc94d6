"""sglang >= 0.5.23: ``bootstrap.init_parallel_runtime(*, server_args, device, dist_port)`` gets the shared AFTER hook.

Invariant: upstream's result is returned unchanged; the exchange runs once per rank. Cost: the exchange's.
"""

from sglang_overlay.patches.cluster_consistency.exchange import after_group_init as after_parallel_runtime

__all__ = ["after_parallel_runtime"]
