"""cluster-consistency's knob: how long a rank waits for every other rank's report (read when it waits)."""

from sglang_overlay.core.registry import Knob

WAIT_S = Knob(
    "SGLANG_OVERLAY_CLUSTER_WAIT_S",
    "20",
    "seconds a rank waits for every rank's overlay report after the process group is up (a rank that never "
    "reports runs without the overlay: start-up is refused after this wait)",
    kind="number",
    minimum=1,
)
