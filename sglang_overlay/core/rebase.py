"""Rebase check: would the locked targets survive another upstream wheel? Read from the wheel, never installed.

Per patch and target (and per dependency: what the hooks call without hooking it) of the current pin, in the words
start-up and ``check`` use (``core.verify.judge``): ``match`` (the definition's fingerprint in the other wheel
equals the lock's), ``drift``, ``missing`` or ``unlocked``. Only ``sglang-overlay rebase-check --to`` touches the
network (a ``pip download --no-deps``).

Invariants: read-only; nothing of the other wheel is imported. Cost: one zip read and one parse per module.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from sglang_overlay.core import fingerprint, lockfile
from sglang_overlay.core.verify import TargetStatus, judge, locked_fingerprint


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


def report(wheel: Path, owners, dependencies: bool = False) -> list[TargetStatus]:
    """Per owner (``core.framework.locked``: the patches and the framework) and target, or with ``dependencies``
    per dependency: how it verifies in ``wheel`` against the current lock."""
    lock = lockfile.read_lock()
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise RebaseError(f"{wheel} is not a wheel: {exc}") from exc
    found = []
    with zf:
        names = set(zf.namelist())
        for owner in owners:
            for definition in owner.depends if dependencies else owner.targets:
                member = fingerprint.module_file_in_wheel(definition.module, names)

                def find(member=member, definition=definition) -> str:
                    if member not in names:
                        raise fingerprint.TargetNotFound(f"no {member} in the wheel")
                    return fingerprint.fingerprint_source(zf.read(member).decode("utf-8"), definition.qualname)

                found.append(judge(owner.id, definition, locked_fingerprint(definition, lock), find))
    return found
