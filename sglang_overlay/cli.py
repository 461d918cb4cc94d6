"""The ``sglang-overlay`` command: check, status, lock, launch, demo, rebase-check, series, gsm8k.

Every report is a table that never truncates a patch id or a target (columns fold on a
narrow terminal; without a terminal, as in CI logs and pipes, the table takes its natural
width), and every command that reports takes ``--json``.

- ``check``: a table of every patch and target (fingerprint match / drift /
  missing), enabled or not, whether SGLang will discover the plugin and whether the
  process-start hook is installed; exit 0 only when every enabled patch would apply.
- ``status --url URL``: per process of a running local server, which patches are active.
- ``process-hook --install | --check``: the ``.pth`` hook that enters processes SGLang
  starts without ``load_plugins()`` (tokenizer workers).
- ``lock``: regenerate (or ``--check``) the installed release's lock, patches/pins/<version>/upstream.lock.
- ``launch ARGS``: verify, then run SGLang's own server launcher with ARGS.
- ``rebase-check --to VERSION | --wheel FILE``: would the patches survive another upstream?
- ``gsm8k ARGS``: the GSM8K accuracy runner (scripts/gsm8k_eval.py).
- ``series --write | --check``: regenerate or verify the diff series (patches/*.patch).

Invariants: ``launch`` refuses (exit 2) whatever ``check`` would not call OK; commands that write
(``lock``, ``series --write``, ``process-hook --install``) write only their own files. Cost: each
command is one process; only ``rebase-check --to`` touches the network (pip download).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from importlib.metadata import entry_points
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from rich.console import Console
from rich.table import Table

from sglang_overlay import __version__
from sglang_overlay.core import fingerprint, installed, lockfile, processes, settings
from sglang_overlay.core.installed import installed_sglang_version
from sglang_overlay.core.verify import make_plan
from sglang_overlay.errors import OverlayError
from sglang_overlay.core.registry import discover_patches

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


def plugin_discovery() -> tuple[bool, str]:
    """Will SGLang's ``load_plugins()`` run the overlay in this environment?"""
    from sglang_overlay import plugin

    eps = [ep for ep in entry_points(group=settings.PLUGIN_GROUP) if ep.name == settings.PLUGIN_NAME]
    if not eps:
        return False, f"no '{settings.PLUGIN_NAME}' entry point in {settings.PLUGIN_GROUP} (is sglang-overlay installed?)"
    try:
        loaded = eps[0].load()
    except Exception as exc:  # what SGLang would log and then start without us
        return False, f"entry point {eps[0].value} fails to load: {exc!r}"
    if loaded is not plugin.load:
        return False, f"entry point {eps[0].value} loads {loaded!r}, not this overlay (shadowed?)"
    whitelist = settings.sglang_plugins_whitelist()
    if whitelist is not None and settings.PLUGIN_NAME not in whitelist:
        return False, (
            f"{settings.SGLANG_PLUGINS}={os.environ.get(settings.SGLANG_PLUGINS)!r} does not name "
            f"'{settings.PLUGIN_NAME}': SGLang would skip the overlay silently. Add it to the list or unset it."
        )
    return True, f"{eps[0].value} (dist {eps[0].dist.name if eps[0].dist else '?'})"


def _check_rows(plan) -> list[dict]:
    rows = []
    for patch in plan.patches:
        enabled = patch.id not in plan.disabled
        statuses = plan.statuses.get(patch.id) or [None] * len(patch.targets)
        for target, st in zip(patch.targets, statuses):
            rows.append({
                "patch": patch.id, "role": patch.role, "target": target.path, "hook": target.hook_type,
                "fingerprint": str(st.status) if st else "not checked",
                "expected": st.expected if st else None, "found": st.found if st else None,
                "detail": st.detail if st else "", "enabled": enabled,
            })
    return rows


def _check_report(plan) -> dict:
    """Everything ``check`` says, as data (what ``--json`` prints)."""
    rows = _check_rows(plan)
    discoverable, how = plugin_discovery()
    hook = processes.process_hook_path()
    # the source form needs neither plugin nor process hook: they matter for patches the sources do not carry
    needs_runtime = any(p.id not in plan.source for p in plan.enabled)
    incomplete = Path(sys.prefix, ".sglang-overlay-incomplete").exists()
    # a release the overlay does not support: its targets are not checked, the version problem says it all
    bad = [] if plan.version_problem else [r for r in rows if r["enabled"] and r["fingerprint"] not in ("match", "source")]
    import_problem = None if plan.version_problem else installed.import_problem()
    ok = (not bad and plan.version_problem is None and import_problem is None and not settings.source_applied()
          and not incomplete and (discoverable or not needs_runtime)
          and (hook is not None or not processes.unreached_patches(plan)))
    return {"ok": ok, "sglang": installed_sglang_version(), "pin": lockfile.read_pin().version,
            "supported_pins": list(lockfile.pin_dirs()), "python": installed.running_python(),
            "source_form": sorted(plan.source), "plugin_discoverable": discoverable, "plugin": how,
            "process_hook": str(hook) if hook else None, "strict": settings.strict(),
            "version_problem": plan.version_problem, "import_problem": import_problem, "incomplete": incomplete,
            "targets": rows, "problems": bad}


def run_check(as_json: bool = False) -> int:
    try:
        report = _check_report(make_plan())
    except (OverlayError, OSError, ValueError) as exc:
        err_console.print(f"[red]sglang-overlay check: {exc}[/red]")
        return 1
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print_check(report)
    return 0 if report["ok"] else 1


_COLOUR = {"match": "green", "source": "green", "drift": "red", "missing": "red", "unlocked": "yellow",
           "source-drift": "red"}


def _print_check(report: dict) -> None:
    table = _table(f"sglang-overlay {__version__}: patches over sglang=={report['pin']}",
                   ("patch", "role", "target", "hook", "fingerprint", "enabled"))
    for r in report["targets"]:
        fp = r["fingerprint"]
        table.add_row(r["patch"], r["role"], r["target"], r["hook"], f"[{_COLOUR.get(fp, 'white')}]{fp}[/]",
                      "yes" if r["enabled"] else "[yellow]disabled[/]")
    console.print(table)
    console.print(f"installed sglang: {report['sglang']} (pinned {report['pin']})")
    console.print(f"plugin discoverable: {'yes' if report['plugin_discoverable'] else '[red]NO[/]'}: {report['plugin']}")
    hook = report["process_hook"]
    console.print(f"process-start hook: {hook or '[red]NOT INSTALLED[/] (sglang-overlay process-hook --install)'}")
    console.print(f"strict: {'yes' if report['strict'] else 'no (' + settings.STRICT + '=0)'}")
    for problem in (report["version_problem"], report["import_problem"]):
        if problem:
            console.print(f"[red]{problem}[/]")
    if report["incomplete"]:
        console.print(f"[red]{sys.prefix}: environment set-up did not finish; rerun scripts/apply_patches.sh[/]")
    if settings.source_applied():
        console.print(f"[yellow]{settings.SOURCE_APPLIED}=1: the series is in the sources; runtime hooks are off[/]")
    if report["source_form"]:
        console.print(f"source form: the sglang sources carry {', '.join(report['source_form'])} (the series' diffs; "
                      "runtime hooks stay off for them, fingerprint column: 'source' = verified in the sources)")
    for r in report["problems"]:
        console.print(f"[red]{r['patch']}: {r['target']}: {r['fingerprint']} (expected {r['expected']}, found {r['found']})"
                      f"{': ' + r['detail'] if r.get('detail') else ''}[/]")
    console.print("[green]OK: every enabled patch would apply[/]" if report["ok"] else "[red]NOT OK: see above[/]")


def run_status(url: str, as_json: bool) -> int:
    """Per process of the local server at ``url``: node, rank, role, pid, and which patches are live there."""
    from sglang_overlay.core.server_status import RecordsUntrusted, ServerNotFound, server_status

    try:
        report = server_status(url)
    except (ServerNotFound, RecordsUntrusted) as exc:
        err_console.print(f"[red]sglang-overlay status: {exc}[/red]")
        return 2
    if as_json:
        print(json.dumps(report, indent=2))
        return 0 if report["ok"] else 1
    number = {p.id: f"#{p.position}" for p in discover_patches(lockfile.read_pin().version) if not p.extra}
    table = _table(f"sglang-overlay status: {url}", ("node", "rank", "role", "pid", "overlay", "live patches"))
    for r in report["processes"]:
        if r["overlay"]:
            there = "[green]yes[/]" if not r["skipped"] else f"[red]skipped {', '.join(r['skipped'])}[/]"
        else:
            there = "[red]ABSENT[/]" if r["expected"] else "-"
        live = " ".join(number.get(p, p) for p in r["live"]) or "-"
        table.add_row(r["node"], r["rank"], r["role"], str(r["pid"]), there, live)
    console.print(table)
    console.print("live patches: " + ", ".join(f"{n} {pid}" for pid, n in number.items()))
    console.print("('-': the process runs no patched target; a target's module not imported there is not live)")
    console.print("[green]OK: every process that runs patched code has the overlay[/]" if report["ok"]
                  else "[red]NOT OK: a process runs without the overlay[/]")
    return 0 if report["ok"] else 1


def run_process_hook(install: bool, as_json: bool) -> int:
    path = processes.install_process_hook() if install else processes.process_hook_path()
    if as_json:
        print(json.dumps({"installed": path is not None, "path": str(path) if path else None}))
    elif path:
        console.print(f"process-start hook: {path}")
    else:
        err_console.print(f"[red]process-start hook not installed in {processes.site_dirs()[0]}: "
                          "sglang-overlay process-hook --install[/red]")
    return 0 if path else 1


def run_lock(wheel: str | None, check_only: bool, include_extra: bool, as_json: bool = False) -> int:
    version = installed_sglang_version()
    if version is None:
        err_console.print("sglang-overlay lock: no sglang installed")
        return 1
    # the installed release's own lock (patches/pins/<version>/ for a new pin), or the override
    target_path = lockfile.lock_path() if settings.lock_override() else lockfile.pin_dir(version) / lockfile.LOCK_NAME
    current = lockfile.read_lock(target_path) if target_path.exists() else None
    template = current or lockfile.read_lock(lockfile.pin_dir(lockfile.default_version()) / lockfile.LOCK_NAME)
    from sglang_overlay.core import source_form

    if source_form.applied_series():
        err_console.print("sglang-overlay lock: the installed sglang carries the diff series (source form); "
                          "fingerprints are taken from a pristine sglang (reinstall it, or use another environment)")
        return 1
    wheels = dict(current["upstream"].get("wheels", {})) if current and current["upstream"]["version"] == version else {}
    for path in map(Path, wheel or ()):  # one per CPython tag: sglang ships cp311, cp312, ... wheels
        try:
            name, found, _, tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename as exc:
            err_console.print(f"sglang-overlay lock: {exc}")
            return 1
        if str(name) != "sglang" or str(found) != version:
            err_console.print(f"sglang-overlay lock: {path.name} is not a wheel of the installed sglang {version}")
            return 1
        pythons = {f"{t.interpreter[2]}.{t.interpreter[3:]}" for t in tags if t.interpreter.startswith("cp")}
        for python in pythons:
            wheels[python] = {"file": path.name, "sha256": lockfile.sha256_file(path)}
    if not wheels:
        err_console.print(f"sglang-overlay lock: sglang {version} is not the locked version; pass --wheel FILE for "
                          "each CPython it ships (pip download --no-deps sglang==VERSION --python-version 3.12 ...) "
                          "so the lock records their sha256")
        return 1
    # a new pin starts from the default pin's torch fields: edit them in its lock (apply_patches.sh reads them)
    upstream = {k: v for k, v in template["upstream"].items() if k in lockfile.Pin.__dataclass_fields__}
    pin = lockfile.Pin(**{**upstream, "package": "sglang", "version": version, "wheels": dict(sorted(wheels.items()))})
    patches = [p for p in discover_patches(version) if include_extra or not p.extra]
    try:
        data = lockfile.build_lock(patches, pin, fingerprint.fingerprint_installed, fingerprint.installed_file_digest)
    except fingerprint.TargetNotFound as exc:
        err_console.print(f"sglang-overlay lock: a target is missing in the installed upstream: {exc}")
        return 1
    if check_only:
        same = data == current
        if as_json:
            print(json.dumps({"lock": str(target_path), "sglang": version, "up_to_date": same}))
        elif same:
            console.print(f"{target_path} matches the installed upstream")
        else:
            err_console.print(f"sglang-overlay lock --check: {target_path} differs from the installed upstream")
        return 0 if same else 1
    target_path.parent.mkdir(parents=True, exist_ok=True)
    path = lockfile.write_lock(data, target_path)
    if as_json:
        print(json.dumps({"lock": str(path), "sglang": version, "targets": len(data["targets"]), "written": True}))
    else:
        console.print(f"wrote {path}: sglang=={version}, {len(data['targets'])} target(s)")
    return 0


def _download_wheel(version: str, dest: str) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", dest, f"sglang=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"sglang-overlay rebase-check: pip download of sglang=={version} failed:\n{proc.stderr.strip()}")
    wheels = sorted(Path(dest).glob("sglang-*.whl"))
    if not wheels:
        raise SystemExit(f"sglang-overlay rebase-check: pip download left no wheel in {dest}")
    return wheels[0]


def rebase_report(wheel: Path) -> list[dict]:
    """Per patch and target: unchanged / changed / missing in ``wheel``."""
    lock = lockfile.read_lock()
    rows = []
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for patch in discover_patches(lockfile.read_pin().version):
            for target in patch.targets:
                member = fingerprint.module_file_in_wheel(target.module)
                locked = lock["targets"].get(target.path, {}).get("fingerprint")
                row = {"patch": patch.id, "target": target.path, "locked": locked, "found": None}
                if member not in names:
                    row.update(status="missing", detail=f"no {member} in the wheel")
                else:
                    try:
                        row["found"] = fingerprint.fingerprint_source(zf.read(member).decode("utf-8"), target.qualname)
                        row.update(status="unchanged" if row["found"] == locked else "changed", detail="")
                    except fingerprint.TargetNotFound as exc:
                        row.update(status="missing", detail=str(exc))
                rows.append(row)
    return rows


def run_rebase_check(version: str | None, wheel: str | None, as_json: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(wheel) if wheel else _download_wheel(version, tmp)
        if not path.is_file():
            err_console.print(f"sglang-overlay rebase-check: no such wheel {path}")
            return 2
        rows = rebase_report(path)
    label = path.name
    if as_json:
        print(json.dumps({"wheel": label, "targets": rows}, indent=2))
    else:
        table = _table(f"rebase-check: the series against {label}", ("patch", "target", "status", "detail"))
        colour = {"unchanged": "green", "changed": "yellow", "missing": "red"}
        for r in rows:
            table.add_row(r["patch"], r["target"], f"[{colour[r['status']]}]{r['status']}[/]", r["detail"])
        console.print(table)
        moved = [r for r in rows if r["status"] != "unchanged"]
        console.print(f"{len(rows) - len(moved)} unchanged, {sum(r['status'] == 'changed' for r in rows)} changed, "
                      f"{sum(r['status'] == 'missing' for r in rows)} missing")
    return 0 if all(r["status"] == "unchanged" for r in rows) else 1


def run_series(write: bool, upstream: str | None, as_json: bool = False) -> int:
    """Regenerate (``--write``) or verify (``--check``) patches/series and patches/*.patch."""
    from sglang_overlay.core import series as series_diff, source_form

    package_dir = Path(upstream) if upstream else source_form.sglang_package_dir()
    if package_dir is None or not package_dir.is_dir():
        err_console.print(f"sglang-overlay series: no sglang package at {package_dir}")
        return 2
    patches_dir = lockfile.default_lock_path().parent  # the pin folder patches/pins/<version>/
    try:
        files = series_diff.generate(package_dir)
    except (series_diff.SeriesError, fingerprint.TargetNotFound, OSError) as exc:
        err_console.print(f"[red]sglang-overlay series: {exc}[/red]")
        return 1
    readme = lockfile.patches_dir().parent / "README.md"
    series = [p for p in discover_patches(lockfile.read_pin().version) if not p.extra]
    default_pin = patches_dir == lockfile.pin_dir(lockfile.default_version())  # the README tables: the default pin
    try:
        readme_now = readme.read_text(encoding="utf-8") if readme.is_file() and default_pin else None
        readme_new = series_diff.readme_with_block(readme_now, series) if readme_now is not None else None
    except series_diff.SeriesError as exc:
        err_console.print(f"[red]sglang-overlay series: {exc}[/red]")
        return 1
    if write:
        written = series_diff.write(files, patches_dir)
        if readme_new is not None and readme_new != readme_now:
            readme.write_text(readme_new, encoding="utf-8")
            written.append(readme)
        if as_json:
            print(json.dumps({"written": [str(p) for p in written], "upstream": str(package_dir)}))
            return 0
        for path in written:
            console.print(f"wrote {path}")
        console.print(f"wrote {patches_dir / series_diff.SERIES_FILE}: {len(files)} patch(es) against {package_dir}")
        return 0
    problems = series_diff.differences(files, patches_dir)
    if readme_new is not None and readme_new != readme_now:
        problems.append(f"{readme}: the generated tables of the series are stale")
    if as_json:
        print(json.dumps({"up_to_date": not problems, "problems": problems, "patches": [f.name for f in files],
                          "upstream": str(package_dir)}))
        return 1 if problems else 0
    for problem in problems:
        err_console.print(f"[red]{problem}[/red]")
    if problems:
        err_console.print("[red]the committed series differs from the registry and the installed upstream: "
                          "run sglang-overlay series --write[/red]")
        return 1
    console.print(f"{patches_dir / series_diff.SERIES_FILE}: {len(files)} patch(es) up to date against {package_dir}")
    return 0


def run_launch(args: list[str]) -> int:
    cmd = [sys.executable, "-m", "sglang.launch_server", *args]
    if any(a in ("-h", "--help") for a in args):
        console.print("sglang-overlay launch: verifies the overlay, then runs SGLang's launcher "
                      "(python -m sglang.launch_server) with these arguments. SGLang's own options follow.\n")
        return subprocess.call(cmd)
    code = run_check()
    if code != 0:
        err_console.print("[red]sglang-overlay launch: refusing to start a server the overlay would not patch[/red]")
        return 2
    os.execv(sys.executable, cmd)
    return 0  # not reached


def _demo_tooling():
    """The CPU stand-ins and tiny-model builder live with the test tooling of a checkout, never in what a
    GPU user installs: the demo runs from a checkout only."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "tests" / "support" / "real_server" / "server.py").is_file():
        raise SystemExit("sglang-overlay demo runs from a checkout of sglang-overlay (it uses the test tooling's "
                         "CPU stand-ins for sgl_kernel); on a GPU host use: sglang-overlay launch --model-path ...")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from tests.support.real_server import server

    return server


def run_demo(tokenizer_workers: int, log_dir: str | None) -> int:
    """A patched server on the CPU with the tiny offline model: URL and per-process status, until Ctrl-C."""
    import signal
    import time

    server_tools = _demo_tooling()
    logs = Path(log_dir or tempfile.mkdtemp(prefix="sglang-overlay-demo-"))
    console.print(f"building the tiny offline model and starting a patched server (log: {logs}) ...")
    config = server_tools.ServerConfig(overlay=True, launcher="overlay", tokenizer_workers=tokenizer_workers)

    def interrupt(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # like Ctrl-C: the launch is stopped whole, never orphaned
    try:
        server = server_tools.start_server(config, logs)
    except server_tools.ServerStartError as exc:
        err_console.print(f"[red]sglang-overlay demo: the server did not start: {exc}[/red]")
        return 1
    except KeyboardInterrupt:  # start_server has stopped the launch already
        console.print("interrupted while starting; server stopped")
        return 130
    try:
        console.print(f"[green]serving at {server.url}[/] (ready in {server.time_to_ready:.0f} s; OpenAI API at "
                      f"{server.url}/v1, model: the tiny random-weight model, so answers are noise)")
        run_status(server.url, as_json=False)
        import urllib.request

        with urllib.request.urlopen(f"{server.url}/v1/models", timeout=30) as reply:
            model = json.load(reply)["data"][0]["id"]
        body = json.dumps({"model": model, "prompt": "Question: 2+2?", "max_tokens": 8})
        console.print(f"try: curl {server.url}/v1/completions -H 'Content-Type: application/json' -d '{body}'")
        console.print("Ctrl-C stops the server")
        while server.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        left = server.stop()
        console.print(f"server stopped{'; killed leftovers ' + str(left) if left else ''}")
    return 0 if server.process.returncode in (0, -15, -2, -9, None) else 1


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
    p.add_argument("--wheel", action="append", help="a wheel of the installed sglang, to record its sha256 for its "
                   "Python (repeat for each CPython; needed for a new version)")
    p.add_argument("--check", action="store_true", help="compare only; exit 1 when the lock differs")
    p.add_argument("--include-extra", action="store_true", help=f"also lock patches from {settings.EXTRA_PATCHES}")
    p = command("rebase-check", "report which targets another upstream release changed")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--to", metavar="VERSION", help="pip download --no-deps sglang==VERSION")
    g.add_argument("--wheel", metavar="FILE", help="a local sglang wheel")
    p = command("series", "regenerate or verify the diff series (patches/*.patch) against the installed upstream", True,
                ("--write", "regenerate patches/series, patches/NNNN-<id>.patch and the README's tables"),
                ("--check", "exit 1 when the committed series differs from the generated one"))
    p.add_argument("--upstream", metavar="DIR", help="a pristine sglang package directory (default: the installed one)")
    p = command("status", "per process of a running local server: is the overlay there, which patches")
    p.add_argument("--url", required=True, help="the server's URL, e.g. http://127.0.0.1:30000")
    p = command("demo", "CPU-only try-out: a patched server on a tiny offline model (from a checkout)", False)
    p.add_argument("--tokenizer-worker-num", type=int, default=1, help="SGLang's tokenizer workers (default 1)")
    p.add_argument("--log-dir", help="where the server log goes (default: a new temporary folder)")
    command("process-hook", "the .pth hook that enters processes SGLang starts without load_plugins()", True,
            ("--install", "write it into this environment's site-packages"),
            ("--check", "exit 1 when it is not installed"))
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
        "status": lambda: run_status(args.url, args.json),
        "demo": lambda: run_demo(args.tokenizer_worker_num, args.log_dir),
        "process-hook": lambda: run_process_hook(args.install, args.json),
        "lock": lambda: run_lock(args.wheel, args.check, args.include_extra, args.json),
        "rebase-check": lambda: run_rebase_check(args.to, args.wheel, args.json),
        "series": lambda: run_series(args.write, args.upstream, args.json),
    }
    return commands[args.command]()


if __name__ == "__main__":
    sys.exit(main())
