"""What a rank reports about its overlay, and how two reports differ (pure; no torch, no store).

Job: :func:`local_state` is this process's declared overlay (version, pin and lock digest, installed sglang,
enabled patches, strictness, host, node, pid and process title); :func:`differences` names each field where
another rank differs. Invariant: only fields that change what runs are compared (host, node, pid and title only
name the rank). Cost: one
lock read and one registry discovery per process (once, at start-up).
"""

from __future__ import annotations

import os
import socket

from sglang_overlay.core.registry import declared_overlay

COMPARED = ("overlay", "sglang", "pin", "lock", "patches", "strict")


def local_state(node_rank: int) -> dict:
    """This rank's report: the overlay it declares (``core.registry.declared_overlay``), and what names the rank."""
    return {
        **declared_overlay(),
        "host": socket.gethostname(),
        "node": node_rank,
        "pid": os.getpid(),
        "title": _title(),
    }


def _title() -> str:
    """SGLang's title of this process (``sglang::scheduler_TP1``), set before the process group exists."""
    try:
        import setproctitle

        return setproctitle.getproctitle().strip()
    except Exception:  # no setproctitle: the rank still reports, only less readably
        return ""


def differences(mine: dict, theirs: dict) -> list[str]:
    """Each compared field where ``theirs`` differs from ``mine``, in words."""
    found = []
    for key in COMPARED:
        a, b = mine.get(key), theirs.get(key)
        if a == b:
            continue
        if key == "patches":
            only_here = sorted(set(a or ()) - set(b or ()))
            only_there = sorted(set(b or ()) - set(a or ()))
            parts = [
                f"not enabled there: {', '.join(only_here)}" if only_here else "",
                f"enabled there only: {', '.join(only_there)}" if only_there else "",
            ]
            found.append("patches " + "; ".join(p for p in parts if p))
        else:
            found.append(f"{key} {b!r} there, {a!r} here")
    return found
