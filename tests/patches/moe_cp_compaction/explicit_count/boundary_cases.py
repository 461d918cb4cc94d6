"""Shared pieces of the explicit_count/ boundary tests (sglang < 0.5.23): tolerances, the recorder reset and
the two ``forward_deepep`` paths of the session's ``env`` (conftest.py): ``"patched"``, the hooked method, and
``"upstream"``, its unwrapped original.

Invariant: no test here; a helper touches only the layer and recorder of the ``env`` it is handed.
Cost: one layer forward per ``forward_path`` call, nothing at import.
"""

from tests.support.moe_standins import MoeShape

HIDDEN = MoeShape().hidden
TOL = dict(rtol=1e-5, atol=1e-5)


def reset(env):
    """Empty what the recorder (gate, shared experts, top-k) and the stand-in dispatcher saw."""
    env["rec"].gate.clear(), env["rec"].shared.clear(), env["rec"].topk.clear()
    env["moe"].experts.dispatcher.received.clear()


def forward_path(env, path, local, batch):
    """One ``forward_deepep`` call on ``path``: ``"patched"`` (hooked) or ``"upstream"`` (unwrapped)."""
    if path == "patched":
        return env["moe"](local, batch)
    return env["upstream"](env["moe"], local, batch)
