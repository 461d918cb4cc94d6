"""Per-process status records: where they live, and that only this user's processes can write them.

Each overlay process keeps one small JSON record, ``<pid>.json``, in :func:`status_dir`
(``$SGLANG_OVERLAY_STATUS_DIR``, else ``<tmp>/sglang-overlay-<uid>/status``), and may keep records of other
kinds beside it (``<pid>.<kind>.json``: a patch's own, such as cluster-consistency's ``peers``); ``sglang-overlay
status`` reads them. The default path is predictable and the temp folder is shared, so the folder is trusted only
when it is this user's own: every folder this module creates is made private (mode 0700), and a folder
(the per-user one and ``status`` under it, or the override) that is a link, is not a directory, belongs
to another user or is writable by group or others is refused (:class:`UntrustedFolder`) for writing and
for reading alike. Inside a trusted folder every name is opened relative to the folder's descriptor,
without following links (``O_NOFOLLOW``), the temporary record created exclusively (``O_EXCL``) with mode
0600 and renamed over the record: a planted link is never written through, and a record another user
planted is never read (they cannot write into the folder, and a record not owned by this user is ignored).

Invariants: a write never follows a link and never writes outside a trusted folder; a refused folder
costs one warning per process and never takes the server down (visibility only). Cost: a ``mkdir`` and
two ``lstat`` per folder level plus one small file write per record change; a read is one ``open``.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
from pathlib import Path

from sglang_overlay.core import settings

logger = logging.getLogger("sglang_overlay")
_WARNED: set[str] = set()


class UntrustedFolder(OSError):
    """The records folder is not this user's own private folder: nothing is written to or read from it."""


def _shared_temp() -> str:
    return tempfile.gettempdir()


def status_dir() -> Path:
    """Where processes keep their records: ``$SGLANG_OVERLAY_STATUS_DIR``, else a per-user temp folder."""
    override = os.environ.get(settings.STATUS_DIR)
    return Path(override) if override else Path(_shared_temp()) / f"sglang-overlay-{os.getuid()}" / "status"


def _levels(directory: Path) -> list[Path]:
    """The folders that must be this user's own: the per-user folder and ``status`` for the default path
    (the temp folder above them is shared by design), the folder itself for an override."""
    if os.environ.get(settings.STATUS_DIR):
        return [directory]
    return [directory.parent, directory]


def _trust(path: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedFolder(f"{path} is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedFolder(f"{path} is not a directory")
    if st.st_uid != os.geteuid():
        raise UntrustedFolder(f"{path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UntrustedFolder(f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})")


def open_folder(create: bool) -> int:
    """A descriptor of the records folder, after checking every level is trusted (made private where
    ``create`` and missing). Raises UntrustedFolder, or FileNotFoundError where it does not exist."""
    directory = status_dir()
    levels = _levels(directory)
    if create and not levels[0].parent.is_dir():  # an override's missing parents: made private too
        os.makedirs(levels[0].parent, 0o700, exist_ok=True)
    for level in levels:
        if create:
            try:
                os.mkdir(level, 0o700)
            except FileExistsError:
                pass
        _trust(level, os.lstat(level))
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _trust(directory, os.fstat(fd))  # the folder opened is the folder checked
    except BaseException:
        os.close(fd)
        raise
    return fd


def _warn_once(directory: Path, exc: OSError) -> None:
    if str(directory) not in _WARNED:
        _WARNED.add(str(directory))
        logger.warning("sglang-overlay: not keeping process records in %s: %s", directory, exc)


def _name(pid: int, kind: str | None) -> str:
    if kind is not None and not kind.isidentifier():
        raise ValueError(f"a record kind is a plain word, not {kind!r}")
    return f"{pid}.json" if kind is None else f"{pid}.{kind}.json"


def write(pid: int, record: dict, kind: str | None = None) -> bool:
    """Write ``record`` as ``<pid>.json`` (``<pid>.<kind>.json``); False (one warning per process) when the
    folder is refused or the write fails."""
    try:
        fd = open_folder(create=True)
    except OSError as exc:
        _warn_once(status_dir(), exc)
        return False
    tmp = f".{_name(pid, kind)}.tmp"
    try:
        try:
            os.unlink(tmp, dir_fd=fd)
        except FileNotFoundError:
            pass
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        with os.fdopen(out, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(record))
        os.replace(tmp, _name(pid, kind), src_dir_fd=fd, dst_dir_fd=fd)
        return True
    except OSError as exc:  # visibility must never take the server down
        _warn_once(status_dir(), exc)
        return False
    finally:
        os.close(fd)


def read(pid: int, kind: str | None = None) -> tuple[dict, float] | None:
    """``(record, mtime)`` of ``<pid>.json`` (``<pid>.<kind>.json``), None when there is none (or it is not
    this user's own file). Raises UntrustedFolder when the folder itself is not to be trusted."""
    try:
        fd = open_folder(create=False)
    except FileNotFoundError:
        return None
    try:
        handle = os.open(_name(pid, kind), os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    with os.fdopen(handle, encoding="utf-8") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        try:
            return json.loads(fh.read()), st.st_mtime
        except ValueError:
            return None


def exists(pid: int) -> bool:
    try:
        return read(pid) is not None
    except OSError:
        return False


def forget(pid: int, kind: str | None = None) -> None:
    """Remove ``<pid>.json`` (``<pid>.<kind>.json``) at exit, inside a trusted folder only."""
    try:
        fd = open_folder(create=False)
    except OSError:
        return
    try:
        os.unlink(_name(pid, kind), dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)
