"""The ``sglang-overlay`` command: check, run and report the overlay patch set over a pinned SGLang release.

Every report is a table that never truncates a patch id or a target (columns fold on a narrow terminal;
without a terminal, as in CI logs and pipes, the table takes its natural width), and every command that
reports takes ``--json``.

- ``check``: every patch and target (match / drift / missing), enabled or not, the plugin's discovery and
  the process-start hook; exit 0 only when ``core.readiness.ready()`` finds nothing. ``check --needed``: each
  patch's probe of upstream's bug (``core.needed``).
- ``status --url URL``: per process of a running server, which patches are live (this host's records for a
  local server, else its ``GET /overlay/status``).
- ``process-hook --install | --check``: the ``.pth`` hook (``core.process_hook``).
- ``lock [--check]``: regenerate or compare the installed release's lock (``core.lockfile.regenerate``).
- ``launch ARGS``: ``check`` with ARGS as the launch's command line, then SGLang's own launcher.
- ``rebase-check --to VERSION | --wheel FILE``: the targets against another upstream (``core.rebase``).
- ``gsm8k ARGS``: the GSM8K accuracy runner (``sglang_overlay_gsm8k``).

The package: ``render`` (consoles, tables), ``check`` (check, launch), ``status``, ``maintain`` (lock,
rebase-check, process-hook); here the parser and the dispatch. Invariants: no rule lives here (``launch``
refuses exactly what ``check`` reports); commands that write (``lock``, ``process-hook --install``) write only
their own files. Cost: one process per command.
"""

from __future__ import annotations

import argparse
import os
import sys

from sglang_overlay.cli.check import run_check, run_launch, run_needed
from sglang_overlay.cli.maintain import run_lock, run_process_hook, run_rebase_check
from sglang_overlay.cli.status import run_status
from sglang_overlay.core import settings
from sglang_overlay.observe.http_status import KEY_ENV
from sglang_overlay.version import __version__


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

    p = command("check", "verify every patch against the installed upstream")
    p.add_argument("--needed", action="store_true", help="run each patch's probe of upstream's bug instead: is "
                   "it still needed on the installed release (needed / fixed upstream / cannot tell)")  # fmt: skip
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
        "check": lambda: run_needed(args.json) if args.needed else run_check(args.json),
        "status": lambda: run_status(args.url, args.json, args.api_key, args.http),
        "process-hook": lambda: run_process_hook(args.install, args.json),
        "lock": lambda: run_lock(args.wheel, args.check, args.include_extra, args.json),
        "rebase-check": lambda: run_rebase_check(args.to, args.wheel, args.json),
    }
    return commands[args.command]()


if __name__ == "__main__":
    sys.exit(main())
