"""The overlay's own start-up cost in this process: wall and CPU time, and the modules it made the process import.

Usage::

    with startup_cost.span("import"):         # the overlay's own imports, where they happen
        from sglang_overlay.core import hooking
    with startup_cost.span("apply"):          # each step; a step may run more than once
        ...
    startup_cost.snapshot()  # {"import": {"count": 1, "wall_ms": 12.0, "cpu_ms": 9.1, "modules": 40}, ...}

The snapshot is kept in the process record (``observe.processes``) and shown by ``status --json``. CPU time is
``time.process_time`` (every thread of the process: where SGLang runs threads beside a step, an upper bound);
``modules`` counts entries ``sys.modules`` gained during the step (modules SGLang had imported already cost
nothing). A span covers the overlay's own work only: "import" wraps the overlay's imports where they happen (the
package, the plugin module, the process-start trigger's), never the time between them, in which a process started
through the ``.pth`` line imports SGLang itself (a span from the package's first import to ``load_plugins()``
counted 17 s and 5,400 of SGLang's modules there). Invariant: measuring changes nothing the process does. Cost:
three clock reads per step.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

_SPANS: dict[str, list[float]] = {}  # name -> [count, wall_s, cpu_s, modules]


def _now() -> tuple[float, float, int]:
    return time.perf_counter(), time.process_time(), len(sys.modules)


def _add(name: str, since: tuple[float, float, int]) -> None:
    wall, cpu, modules = _now()
    found = _SPANS.setdefault(name, [0, 0.0, 0.0, 0])
    found[0] += 1
    found[1] += wall - since[0]
    found[2] += cpu - since[1]
    found[3] += modules - since[2]


@contextmanager
def span(name: str):
    since = _now()
    try:
        yield
    finally:
        _add(name, since)


def snapshot() -> dict:
    return {
        name: {"count": int(c), "wall_ms": round(w * 1e3, 2), "cpu_ms": round(u * 1e3, 2), "modules": int(m)}
        for name, (c, w, u, m) in _SPANS.items()
    }
