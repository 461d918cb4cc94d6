"""``status --url``: per process of a running server, which patches are live (``observe.server_status`` for a
local server, its ``GET /overlay/status`` otherwise, ``observe.http_status``).

Invariant: the same table and exit code either way (0 OK, 1 NOT OK, 2 cannot tell). Cost: one scan or one request.
"""

from __future__ import annotations

import json
import textwrap

from sglang_overlay.cli.render import _table, console, err_console
from sglang_overlay.core import lockfile, verify


def run_status(url: str, as_json: bool, api_key: str | None = None, over_http: bool = False) -> int:
    """Per process of the server at ``url``: node, rank, role, pid, and which patches are live there; from this
    host's records when the server is local, else from its ``GET /overlay/status`` (``observe.http_status``)."""
    from sglang_overlay.observe import http_status, server_status

    try:
        if over_http or not server_status.is_local_host(url):
            report = http_status.fetch(url, api_key)
        else:
            report = {**server_status.server_status(url), "source": "this host's process records"}
            if not server_status.serves_sglang(report):  # a forwarder holds the port: ask the server behind it
                try:
                    report = http_status.fetch(url, api_key)
                except http_status.KeyRefused:
                    raise
                except http_status.StatusUnavailable:
                    pass  # no report there (not an SGLang server behind it): what this host sees stands
    except http_status.NoOverlay as exc:
        err_console.print(f"[red]sglang-overlay status: NOT OK: {exc}[/red]")
        return 1
    except (server_status.ServerNotFound, server_status.RecordsUntrusted, http_status.StatusUnavailable) as exc:
        err_console.print(f"[red]sglang-overlay status: {exc}[/red]")
        return 2
    if as_json:
        print(json.dumps(report, indent=2))
        return 0 if report["ok"] else 1
    number = {p.id: f"#{p.position}" for p in verify.declared_patches(lockfile.read_pin().version) if not p.extra}
    table = _table(f"sglang-overlay status: {url} ({report['source']})", ("node", "rank", "role", "pid", "overlay",
                                                                         "live patches"))  # fmt: skip
    for r in report["processes"]:
        if r.get("remote"):
            there = "[green]yes[/]" if r["ok"] else ("[red]DIFFERS[/]" if r["overlay"] else "[red]ABSENT[/]")
            live = " ".join(number.get(p, p) for p in r["patches"]) + " *" if r["patches"] else "-"
        elif r["overlay"]:
            there = "[green]yes[/]" if not r["skipped"] else f"[red]skipped {', '.join(r['skipped'])}[/]"
            live = " ".join(number.get(p, p) for p in r["live"]) or "-"
        else:
            there, live = ("[red]ABSENT[/]" if r["expected"] else "-"), "-"
        table.add_row(r["node"], r["rank"], r["role"], str(r["pid"] or "-"), there, live)
    console.print(table)
    legend = "live patches: " + ", ".join(f"{n} {pid}" for pid, n in number.items())
    console.print(textwrap.fill(legend, width=100, subsequent_indent="  ", break_on_hyphens=False))
    console.print("('-': the process runs no patched target; a target's module not imported there is not live)")
    remote = [r for r in report["processes"] if r.get("remote")]
    if remote:
        console.print("(*: another node's ranks, as they reported at start-up: the patches they enabled)")
    for r in remote:
        if r["differs"]:
            console.print(f"[red]{r['node']} {r['rank']}: {'; '.join(r['differs'])}[/]")
    console.print(
        "[green]OK: every process that runs patched code has the overlay[/]"
        if report["ok"]
        else "[red]NOT OK: a process or a rank runs without the overlay, or with another one[/]"
    )
    return 0 if report["ok"] else 1
