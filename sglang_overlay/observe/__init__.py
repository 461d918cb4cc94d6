"""Observability: what an operator sees of the overlay, kept apart from what decides whether a process starts.

- ``startup_cost``: what the overlay costs this process, per step (wall, CPU, modules imported);
- ``records``: the private per-user folder of per-process JSON records, written without following a link;
- ``processes``: a process's role (decided there only), its one INFO line, its :class:`~.processes.ProcessRecord`;
- ``info``: the ``sglang_overlay_info`` series on SGLang's ``/metrics``;
- ``server_status``: ``status --url`` of a local server, from its processes' records (and a patch's own view);
- ``http_status``: ``GET /overlay/status`` on upstream's app, and the client that asks it remotely.

:func:`attach` hands :data:`OBSERVER` to ``core.hooking`` (the entry points call it before ``apply``). The core
never imports this package (a contract CI checks): hooking tells an observer what happened and never asks it,
so a failure here is one warning and a process with nothing attached hooks exactly the same.
Invariant: importing this package imports none of its modules. Cost: what each module's docstring says.
"""

from __future__ import annotations

import sys


class _Observer:
    """``core.hooking.Observer``: measures steps, keeps the record, says the INFO line once, serves metrics and
    the status route once their modules have executed."""

    def span(self, step: str):
        from sglang_overlay.observe import startup_cost

        return startup_cost.span(step)

    def changed(self, status: dict) -> None:
        from sglang_overlay.observe import processes

        processes.write_record(status)

    def started(self, status: dict, role: str | None, announce: bool) -> None:
        from sglang_overlay.observe import processes

        if announce:
            processes.announce(status, role)
        else:
            processes.write_record(status)

    def watches(self, role: str | None) -> list:
        from sglang_overlay.observe import http_status, info, processes

        def publish_info() -> None:  # SGLang's metrics are set up: the info series
            from sglang_overlay.core import hooking

            info.publish(role or processes.process_role(), tuple(hooking.status()["skipped"]))

        def serve_status() -> None:  # GET /overlay/status on upstream's app, from its start
            http_status.attach(sys.modules[processes.HTTP_MODULE].app)

        return [("prometheus_client", None, publish_info), (processes.HTTP_MODULE, "app", serve_status)]


OBSERVER = _Observer()


def attach() -> None:
    """Observe this process's hooking from now on (idempotent)."""
    from sglang_overlay.core import hooking

    hooking.observe(OBSERVER)
