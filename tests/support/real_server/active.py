"""What a real server's log says of the overlay: the one INFO line each overlay process writes
(``sglang-overlay: active pid=... role=... patches=... fingerprints=...``), parsed, and the patches the
installed pin's series holds.

Invariant: read from the server's own log, never from the overlay's records. Cost: one regex over the log.
"""

import re

from sglang_overlay.core.installed import installed_sglang_version
from sglang_overlay.core.registry import discover_patches

ACTIVE = re.compile(r"sglang-overlay: active pid=(\d+) role=(\S+) patches=(\S+) fingerprints=(\S+)")
PATCHES = {p.id for p in discover_patches(installed_sglang_version())}  # every patch of the installed pin


def active_lines(server) -> list[tuple[int, str, set, str]]:
    return [
        (int(pid), role, set(patches.split(",")), fp) for pid, role, patches, fp in ACTIVE.findall(server.log_text())
    ]
