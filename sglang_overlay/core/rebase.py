"""Rebase check: would the locked targets survive another upstream wheel? Read from the wheel, never installed.

Per patch and target (and per dependency: what the hooks call without hooking it) of the current pin: ``unchanged`` (the target's fingerprint in the other wheel equals
the lock's), ``changed`` or ``missing``. Only ``sglang-overlay rebase-check --to`` touches the network (a
``pip download --no-deps``).

Invariants: read-only; nothing of the other wheel is imported. Cost: one zip read and one parse per module.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from sglang_overlay.core import fingerprint, lockfile


class RebaseError(RuntimeError):
    """The other upstream's wheel could not be fetched."""


def download_wheel(version: str, dest: str) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        dest,
        f"sglang=={version}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RebaseError(f"pip download of sglang=={version} failed:\n{proc.stderr.strip()}")
    wheels = sorted(Path(dest).glob("sglang-*.whl"))
    if not wheels:
        raise RebaseError(f"pip download left no wheel in {dest}")
    return wheels[0]


def report(wheel: Path, patches, dependencies: bool = False) -> list[dict]:
    """Per patch and target (with ``dependencies``: per dependency) of ``patches``: unchanged / changed /
    missing in ``wheel``."""
    lock = lockfile.read_lock()
    section = lock.get("dependencies", {}) if dependencies else lock["targets"]
    rows = []
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise RebaseError(f"{wheel} is not a wheel: {exc}") from exc
    with zf:
        names = set(zf.namelist())
        for patch in patches:
            for target in patch.depends if dependencies else patch.targets:
                member = fingerprint.module_file_in_wheel(target.module, names)
                locked = section.get(target.path, {}).get("fingerprint")
                row = {"patch": patch.id, "target": target.path, "locked": locked, "found": None}
                if dependencies:
                    row["needed_by"] = target.needed_by
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
