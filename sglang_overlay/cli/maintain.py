"""The maintainer's commands: ``lock [--check]``, ``rebase-check``, ``process-hook``.

Invariant: commands that write (``lock``, ``process-hook --install``) write only their own files.
Cost: ``lock`` reads every target's source; ``rebase-check`` one wheel download or read.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from sglang_overlay.cli.render import _table, console, err_console
from sglang_overlay.core import dependencies, framework, installed, lockfile, process_hook, rebase, verify


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
        depends = {p.id: dependencies.find(p, version) for p in patches}  # what the hooks use, found afresh
        path, data, current = lockfile.regenerate(framework.locked(patches, depends), wheel or ())
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
        lock = lockfile.read_lock()
        patches = verify.declared_patches(lockfile.Pin(**lock["upstream"]).version)
        owners = verify.locked_owners(lock, patches)
        try:
            found = rebase.report(path, owners), rebase.report(path, owners, dependencies=True)
            rows, deps = ([st.to_json() for st in part] for part in found)
        except rebase.RebaseError as exc:
            err_console.print(f"sglang-overlay rebase-check: {exc}")
            return 2
    label = path.name
    if as_json:
        print(json.dumps({"wheel": label, "targets": rows, "dependencies": deps}, indent=2))
    else:
        colour = {"match": "green", "drift": "yellow", "missing": "red", "unlocked": "red"}
        for title, found in (("targets", rows), ("dependencies (called or overridden, not hooked)", deps)):
            table = _table(
                f"rebase-check: the patches' {title} against {label}", ("patch", "target", "status", "detail")
            )
            for r in found:
                detail = r["detail"] or (f"needed by {r['needed_by']}" if "needed_by" in r else "")
                table.add_row(r["patch"], r["target"], f"[{colour[r['status']]}]{r['status']}[/]", detail)
            console.print(table)
        every = (*rows, *deps)
        console.print(", ".join(f"{sum(r['status'] == word for r in every)} {word}" for word in colour))
    return 0 if all(r["status"] == "match" for r in (*rows, *deps)) else 1
