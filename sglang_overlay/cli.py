"""The ``sglang-overlay`` command: check, run and report the overlay patch set over a pinned SGLang release.

Every report is a table that never truncates a patch id or a target (columns fold on a narrow terminal;
without a terminal, as in CI logs and pipes, the table takes its natural width), and every command that
reports takes ``--json``.

- ``check``: every patch and target (match / drift / missing), enabled or not, the plugin's discovery and
  the process-start hook; exit 0 only when ``core.readiness.ready()`` finds nothing.
- ``status --url URL``: per process of a running server, which patches are live (this host's records for a
  local server, else its ``GET /overlay/status``).
- ``process-hook --install | --check``: the ``.pth`` hook (``core.process_hook``).
- ``lock [--check]``: regenerate or compare the installed release's lock (``core.lockfile.regenerate``).
- ``launch ARGS``: ``check`` with ARGS as the launch's command line, then SGLang's own launcher.
- ``rebase-check --to VERSION | --wheel FILE``: the targets against another upstream (``core.rebase``).
- ``gsm8k ARGS``: the GSM8K accuracy runner (``sglang_overlay_gsm8k``).

Argparse and rendering over the core. Invariants: no rule lives here (``launch`` refuses exactly what
``check`` reports); commands that write (``lock``, ``process-hook --install``) write only their own files.
Cost: one process per command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sglang_overlay.core import identity, installed, lockfile, process_hook, readiness, rebase, settings, verify
from sglang_overlay.core.http_status import KEY_ENV
from sglang_overlay.errors import OverlayError
from sglang_overlay.version import __version__


def _console(stderr: bool = False) -> Console:
    """A console that never cuts a table: its terminal's width on a terminal, else wide enough for any row."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, soft_wrap=True, width=None if probe.is_terminal else 1000)


console = _console()
err_console = _console(stderr=True)


def _table(title: str, columns: tuple[str, ...]) -> Table:
    """Columns fold (wrap) instead of ending in an ellipsis when the console is narrow."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _check_rows(plan, dependencies: bool = False) -> list[dict]:
    """One row per target (or, with ``dependencies``, per dependency) of every patch, enabled or not."""
    rows = []
    for patch in plan.patches:
        enabled = patch.id not in plan.disabled
        found = {st.target.path: st for st in plan.statuses.get(patch.id, []) if st.is_dependency == dependencies}
        for target in patch.depends if dependencies else patch.targets:
            st = found.get(target.path)
            rows.append(
                {
                    "patch": patch.id,
                    "role": patch.role,
                    "target": target.path,
                    "hook": f"uses ({target.needed_by})" if dependencies else target.hook_type,
                    "fingerprint": str(st.status) if st else "not checked",
                    "expected": st.expected if st else None,
                    "found": st.found if st else None,
                    "detail": st.detail if st else "",
                    "enabled": enabled,
                }
            )
    return rows


def _check_report(plan, argv: list[str] | None = None) -> dict:
    """Everything ``check`` says, as data (what ``--json`` prints)."""
    rows, dependencies = _check_rows(plan), _check_rows(plan, dependencies=True)
    problems = readiness.ready(plan, argv=argv, environment=True)
    discoverable, how = readiness.plugin_discovery()
    hook = process_hook.installed_path()
    bad = (
        []
        if any(p.fatal for p in problems)  # another release or another sglang: its targets would say nothing
        else [r for r in (*rows, *dependencies) if r["enabled"] and r["fingerprint"] != "match"]
    )
    return {
        "ok": not problems,
        "sglang": installed.installed_sglang_version(),
        "sglang_file": identity.describe(identity.sglang_identity()),
        "pin": lockfile.read_pin().version,
        "supported_pins": list(lockfile.pin_dirs()),
        "python": installed.running_python(),
        "plugin_discoverable": discoverable,
        "plugin": how,
        "process_hook": str(hook) if hook else None,
        "strict": settings.strict(),
        "version_problem": plan.version_problem,
        "readiness": problems,
        "targets": rows,
        "dependencies": dependencies,
        "problems": bad,
    }


def run_check(as_json: bool = False, argv: list[str] | None = None) -> int:
    try:
        # no launch command line: how many tokenizer workers is not told, so the hook's absence counts
        report = _check_report(verify.make_plan(), [] if argv is None else argv)
    except (OverlayError, OSError, ValueError) as exc:
        err_console.print(f"[red]sglang-overlay check: {exc}[/red]")
        return 1
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print_check(report)
    return 0 if report["ok"] else 1


_COLOUR = {"match": "green", "drift": "red", "missing": "red", "unlocked": "yellow"}


def _print_check(report: dict) -> None:
    table = _table(
        f"sglang-overlay {__version__}: patches over sglang=={report['pin']}",
        ("patch", "role", "target", "hook", "fingerprint", "enabled"),
    )
    for r in report["targets"]:
        fp = r["fingerprint"]
        table.add_row(
            r["patch"],
            r["role"],
            r["target"],
            r["hook"],
            f"[{_COLOUR.get(fp, 'white')}]{fp}[/]",
            "yes" if r["enabled"] else "[yellow]disabled[/]",
        )
    console.print(table)
    deps = report["dependencies"]
    if deps:
        moved = [r for r in deps if r["enabled"] and r["fingerprint"] != "match"]
        console.print(
            f"dependencies (upstream definitions the hooks call or override, locked like targets): "
            f"{len(deps) - len(moved)} of {len(deps)} match" + ("" if moved else " [green]ok[/]")
        )
    console.print(f"installed sglang: {report['sglang']} (pinned {report['pin']}); imports {report['sglang_file']}")
    console.print(
        f"plugin discoverable: {'yes' if report['plugin_discoverable'] else '[red]NO[/]'}: {report['plugin']}"
    )
    hook = report["process_hook"]
    console.print(f"process-start hook: {hook or '[red]NOT INSTALLED[/] (sglang-overlay process-hook --install)'}")
    console.print(f"strict: {'yes' if report['strict'] else 'no (' + settings.STRICT + '=0)'}")
    for r in report["problems"]:
        console.print(
            f"[red]{r['patch']}: {r['target']}: {r['fingerprint']} (expected {r['expected']}, found {r['found']})"
            f"{': ' + r['detail'] if r.get('detail') else ''}[/]"
        )
    for problem in report["readiness"]:
        if problem.patch is None:  # a patch's refusal is its targets' lines above
            console.print(f"[red]{problem}[/]")
    console.print("[green]OK: every enabled patch would apply[/]" if report["ok"] else "[red]NOT OK: see above[/]")


def run_status(url: str, as_json: bool, api_key: str | None = None, over_http: bool = False) -> int:
    """Per process of the server at ``url``: node, rank, role, pid, and which patches are live there; from this
    host's records when the server is local, else from its ``GET /overlay/status`` (``core.http_status``)."""
    from sglang_overlay.core import http_status, server_status

    try:
        if over_http or not server_status.is_local_server(url):
            report = http_status.fetch(url, api_key)
        else:
            report = {**server_status.server_status(url), "source": "this host's process records"}
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


def run_process_hook(install: bool, as_json: bool) -> int:
    path = process_hook.install() if install else process_hook.installed_path()
    if as_json:
        print(json.dumps({"installed": path is not None, "path": str(path) if path else None}))
    elif path:
        console.print(f"process-start hook: {path}")
    else:
        err_console.print(
            f"[red]process-start hook not installed in {process_hook.site_dirs()[0]}: "
            "sglang-overlay process-hook --install[/red]"
        )
    return 0 if path else 1


def run_lock(wheel: list[str] | None, check_only: bool, include_extra: bool, as_json: bool = False) -> int:
    version = installed.installed_sglang_version()
    if version is None:
        err_console.print("sglang-overlay lock: no sglang installed in this environment")
        return 1
    patches = [p for p in verify.declared_patches(version) if include_extra or not p.extra]
    try:
        path, data, current = lockfile.regenerate(patches, wheel or ())
    except (lockfile.LockError, OSError, ValueError) as exc:
        err_console.print(f"sglang-overlay lock: {exc}")
        return 1
    if check_only:
        same = data == current
        if as_json:
            print(json.dumps({"lock": str(path), "sglang": version, "up_to_date": same}))
        elif same:
            console.print(f"{path} matches the installed upstream")
        else:
            err_console.print(f"sglang-overlay lock --check: {path} differs from the installed upstream")
        return 0 if same else 1
    path.parent.mkdir(parents=True, exist_ok=True)
    lockfile.write_lock(data, path)
    if as_json:
        print(json.dumps({"lock": str(path), "sglang": version, "targets": len(data["targets"]), "written": True}))
    else:
        console.print(f"wrote {path}: sglang=={version}, {len(data['targets'])} target(s)")
    return 0


def run_rebase_check(version: str | None, wheel: str | None, as_json: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = Path(wheel) if wheel else rebase.download_wheel(version, tmp)
        except rebase.RebaseError as exc:
            err_console.print(f"sglang-overlay rebase-check: {exc}")
            return 2
        if not path.is_file():
            err_console.print(f"sglang-overlay rebase-check: no such wheel {path}")
            return 2
        patches = verify.declared_patches(lockfile.read_pin().version)
        try:
            rows, deps = rebase.report(path, patches), rebase.report(path, patches, dependencies=True)
        except rebase.RebaseError as exc:
            err_console.print(f"sglang-overlay rebase-check: {exc}")
            return 2
    label = path.name
    if as_json:
        print(json.dumps({"wheel": label, "targets": rows, "dependencies": deps}, indent=2))
    else:
        colour = {"unchanged": "green", "changed": "yellow", "missing": "red"}
        for title, found in (("targets", rows), ("dependencies (called or overridden, not hooked)", deps)):
            table = _table(
                f"rebase-check: the patches' {title} against {label}", ("patch", "target", "status", "detail")
            )
            for r in found:
                detail = r["detail"] or (f"needed by {r['needed_by']}" if "needed_by" in r else "")
                table.add_row(r["patch"], r["target"], f"[{colour[r['status']]}]{r['status']}[/]", detail)
            console.print(table)
        every = (*rows, *deps)
        console.print(
            f"{sum(r['status'] == 'unchanged' for r in every)} unchanged, "
            f"{sum(r['status'] == 'changed' for r in every)} changed, "
            f"{sum(r['status'] == 'missing' for r in every)} missing"
        )
    return 0 if all(r["status"] == "unchanged" for r in (*rows, *deps)) else 1


def run_launch(args: list[str]) -> int:
    cmd = [sys.executable, "-m", "sglang.launch_server", *args]
    if any(a in ("-h", "--help") for a in args):
        console.print(
            "sglang-overlay launch: verifies the overlay, then runs SGLang's launcher "
            "(python -m sglang.launch_server) with these arguments. SGLang's own options follow.\n"
        )
        return subprocess.call(cmd)
    code = run_check(argv=["sglang-overlay", *args])  # the launch's own command line: its tokenizer workers
    if code != 0:
        err_console.print("[red]sglang-overlay launch: refusing to start a server the overlay would not patch[/red]")
        return 2
    os.execv(sys.executable, cmd)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang-overlay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"sglang-overlay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, reports: bool = True, *either: tuple[str, str]):
        """A subcommand; ``reports`` adds --json; ``either`` adds a required choice of flags (flag, help)."""
        p = sub.add_parser(name, help=help)
        if either:
            g = p.add_mutually_exclusive_group(required=True)
            for flag, text in either:
                g.add_argument(flag, action="store_true", help=text)
        if reports:
            p.add_argument("--json", action="store_true", help="print the report as JSON")
        return p

    command("check", "verify every patch against the installed upstream")
    p = command("lock", "regenerate patches/pins/<version>/upstream.lock from the installed upstream")
    p.add_argument(
        "--wheel",
        action="append",
        help="a wheel of the installed sglang, to record its sha256 for its "
        "Python (repeat for each CPython; needed for a new version)",
    )
    p.add_argument("--check", action="store_true", help="compare only; exit 1 when the lock differs")
    p.add_argument("--include-extra", action="store_true", help=f"also lock patches from {settings.EXTRA_PATCHES}")
    p = command("rebase-check", "report which targets another upstream release changed")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--to", metavar="VERSION", help="pip download --no-deps sglang==VERSION")
    g.add_argument("--wheel", metavar="FILE", help="a local sglang wheel")
    p = command("status", "per process of a running server: is the overlay there, which patches")
    p.add_argument("--url", required=True, help="the server's URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--api-key", default=os.environ.get(KEY_ENV), help="the key of a server run with "
                   f"--api-key, for its GET /overlay/status (default: ${KEY_ENV})")  # fmt: skip
    p.add_argument("--http", action="store_true", help="ask the server's GET /overlay/status even when it is local")
    command(
        "process-hook",
        "the .pth hook that enters processes SGLang starts without load_plugins()",
        True,
        ("--install", "write it into this environment's site-packages"),
        ("--check", "exit 1 when it is not installed"),
    )
    sub.add_parser("launch", help="verify, then run sglang.launch_server with the remaining arguments", add_help=False)
    sub.add_parser("gsm8k", help="GSM8K accuracy runner against an OpenAI-compatible server", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("launch", "gsm8k"):  # pass everything after the subcommand through
        if argv[0] == "launch":
            return run_launch(argv[1:])
        from sglang_overlay_gsm8k.cli import main as gsm8k_main

        return gsm8k_main(argv[1:])
    args = build_parser().parse_args(argv)
    commands = {
        "check": lambda: run_check(args.json),
        "status": lambda: run_status(args.url, args.json, args.api_key, args.http),
        "process-hook": lambda: run_process_hook(args.install, args.json),
        "lock": lambda: run_lock(args.wheel, args.check, args.include_extra, args.json),
        "rebase-check": lambda: run_rebase_check(args.to, args.wheel, args.json),
    }
    return commands[args.command]()


if __name__ == "__main__":
    sys.exit(main())
