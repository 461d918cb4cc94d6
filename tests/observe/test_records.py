"""Process records another local user cannot turn against the server (``observe.records``).

The default records folder is ``<tmp>/sglang-overlay-<uid>/status``: a predictable path in a folder every
user can write. Each attack below is played by a real other user (``nobody``, through a forked child that
drops root), against the real write and read paths; where this suite does not run as root it cannot play
another user and those tests skip, with the reason."""

from __future__ import annotations

import json
import logging
import os
import pwd
import socket
import stat
import tempfile
import time
from pathlib import Path

import pytest

from sglang_overlay.observe import processes, records, server_status
from sglang_overlay.patches.cluster_consistency import peers

ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="playing another local user needs root (CI and sessions run as root)")
STATUS = {"applied": {"p": ["t"]}, "pending_modules": [], "pending_patches": [], "skipped": {}}


@pytest.fixture
def shared_tmp(monkeypatch):
    """A fresh stand-in for /tmp (sticky, world-writable) as the temp folder, and no records override."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o1777)
    monkeypatch.setattr(records, "_shared_temp", lambda: str(base))
    monkeypatch.delenv("SGLANG_OVERLAY_STATUS_DIR", raising=False)
    monkeypatch.setattr(records, "_WARNED", set())
    yield base
    for path in sorted(base.rglob("*"), key=lambda p: -len(p.parts)):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    base.rmdir()


def as_user(name: str, action) -> None:
    """Run ``action()`` in a child process as local user ``name`` (it must succeed there)."""
    user = pwd.getpwnam(name)
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, act, report through the exit status
        code = 1
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the action as {name} failed"


def test_records_live_in_a_private_folder(shared_tmp):
    assert records.write(os.getpid(), {"x": 1})
    user_dir, status = records.status_dir().parent, records.status_dir()
    assert user_dir == shared_tmp / f"sglang-overlay-{os.getuid()}" and status == user_dir / "status"
    assert stat.S_IMODE(user_dir.stat().st_mode) == 0o700 and stat.S_IMODE(status.stat().st_mode) == 0o700
    assert stat.S_IMODE((status / f"{os.getpid()}.json").stat().st_mode) == 0o600
    assert records.read(os.getpid())[0] == {"x": 1}
    records.forget(os.getpid())
    assert records.read(os.getpid()) is None


@as_root
def test_another_users_folder_is_refused_and_its_planted_link_never_written_through(shared_tmp, caplog):
    """The reported attack: ``nobody`` creates the predictable folder (mode 777) with a link at the next
    record's temporary path, pointing at a root-owned file; the root process's records go nowhere."""
    victim = shared_tmp / "root-owned.conf"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    status = records.status_dir()
    tmp_name = f".{os.getpid()}.tmp"

    def plant():
        status.mkdir(parents=True)
        os.chmod(status.parent, 0o777)
        os.chmod(status, 0o777)
        os.symlink(victim, status / tmp_name)

    as_user("nobody", plant)
    with caplog.at_level(logging.WARNING, logger="sglang_overlay"):
        assert records.write(os.getpid(), {"pid": os.getpid()}) is False
        assert records.write(os.getpid(), {"pid": os.getpid()}) is False
    assert victim.read_text() == "precious\n" and (status / tmp_name).is_symlink()
    warnings = [r.getMessage() for r in caplog.records if "not keeping process records" in r.getMessage()]
    assert len(warnings) == 1 and "belongs to uid" in warnings[0]  # once per process, naming why
    with pytest.raises(records.UntrustedFolder):
        records.read(os.getpid())


@as_root
def test_records_planted_by_another_user_are_never_reported(shared_tmp):
    """``nobody`` prepares the folder with records that claim the overlay is active in a process that has
    none: ``status`` refuses the folder instead of reporting them."""
    status = records.status_dir()
    me = os.getpid()

    def plant():
        status.mkdir(parents=True, mode=0o755)
        (status / f"{me}.json").write_text(json.dumps({"pid": me, "applied": {"openai-abort-status": ["x"]}}))

    as_user("nobody", plant)

    class Proc:  # what _fresh_record reads of a psutil.Process
        pid = me

        @staticmethod
        def create_time():
            return 0.0

    with pytest.raises(server_status.RecordsUntrusted, match="belongs to uid"):
        server_status._fresh_record(Proc)


@as_root
def test_another_user_cannot_write_into_this_users_folder_nor_plant_a_file_it_reads(shared_tmp):
    assert records.write(os.getpid(), {"mine": True})
    status = records.status_dir()

    def try_to_plant():
        try:
            (status / "4242.json").write_text("{}")
        except PermissionError:
            return
        raise AssertionError("wrote into another user's private folder")

    as_user("nobody", try_to_plant)
    planted = status / "4243.json"  # a file of another user's inside the folder (root put it there)
    planted.write_text(json.dumps({"pid": 4243}))
    os.chown(planted, pwd.getpwnam("nobody").pw_uid, -1)
    assert records.read(4243) is None and records.read(os.getpid())[0] == {"mine": True}


def test_a_link_or_a_folder_others_can_write_is_refused(shared_tmp, tmp_path):
    user_dir = records.status_dir().parent
    user_dir.mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (user_dir / "status").symlink_to(tmp_path / "elsewhere")
    assert records.write(os.getpid(), {}) is False and not list((tmp_path / "elsewhere").iterdir())
    (user_dir / "status").unlink()
    (user_dir / "status").mkdir()
    os.chmod(user_dir / "status", 0o777)
    with pytest.raises(records.UntrustedFolder, match="writable by others"):
        records.open_folder(create=True)


def test_a_record_is_written_whole_and_not_through_a_stale_temporary_link(tmp_path, monkeypatch):
    """Inside a trusted folder too, the temporary record is created exclusively, never through a link."""
    monkeypatch.setenv("SGLANG_OVERLAY_STATUS_DIR", str(tmp_path / "records"))
    assert records.write(os.getpid(), {"a": 1})
    target = tmp_path / "outside.txt"
    target.write_text("keep")
    (tmp_path / "records" / f".{os.getpid()}.tmp").symlink_to(target)
    assert records.write(os.getpid(), {"a": 2})
    assert target.read_text() == "keep" and records.read(os.getpid())[0] == {"a": 2}


def test_an_unchanged_record_is_not_rewritten(tmp_path, monkeypatch):
    """SGLang calls load_plugins() more than once in some processes: the record is written when it changes
    (a write is a new file renamed over the old one: a new inode)."""
    monkeypatch.setenv("SGLANG_OVERLAY_STATUS_DIR", str(tmp_path))
    monkeypatch.setattr(processes, "_LAST_WRITTEN", {})
    path = tmp_path / f"{os.getpid()}.json"
    processes.write_record(STATUS)
    first = path.stat().st_ino
    processes.write_record(dict(STATUS))
    assert path.stat().st_ino == first
    processes.write_record({**STATUS, "pending_modules": ["m"]})
    assert path.stat().st_ino != first and processes.read_record(os.getpid()).pending_modules == ["m"]
    path.unlink()  # removed behind its back: written again
    processes.write_record({**STATUS, "pending_modules": ["m"]})
    assert path.is_file()


def test_a_record_of_another_kind_lives_beside_the_process_record(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_OVERLAY_STATUS_DIR", str(tmp_path))
    assert records.write(os.getpid(), {"a": 1}) and records.write(os.getpid(), {"b": 2}, kind=peers.KIND)
    assert records.read(os.getpid())[0] == {"a": 1} and records.read(os.getpid(), peers.KIND)[0] == {"b": 2}
    records.forget(os.getpid(), peers.KIND)
    assert records.read(os.getpid(), peers.KIND) is None and records.read(os.getpid())[0] == {"a": 1}
    with pytest.raises(ValueError, match="plain word"):
        records.write(os.getpid(), {}, kind="../x")


def _peers(node: int, *groups, missing=(), differing=(), nnodes: int = 2, ranks: int = 2) -> dict:
    verdict = peers.Verdict(ranks, nnodes, "d", ("a", "b"), 20.0, tuple(groups), tuple(missing), tuple(differing))
    return peers.to_json(peers.Peers(0, node, "d", verdict))


def test_status_lists_each_other_node_once_and_each_missing_or_differing_rank(tmp_path, monkeypatch):
    """A local rank's peers record (the job's verdict) gives one row per other node, and one per bad rank."""
    import psutil

    monkeypatch.setenv("SGLANG_OVERLAY_STATUS_DIR", str(tmp_path))
    me = psutil.Process()
    here = socket.gethostname()
    nodes = (peers.Group("0-7", 0, here), peers.Group("8-15", 1, "node-b"), peers.Group("16-22", 2, "node-c"))
    bad = peers.Group("20", 2, "node-c", 78, ("patches not enabled there: b",))
    gone = peers.Group("23", 2, "node-c")
    records.write(me.pid, STATUS)
    records.write(me.pid, _peers(0, *nodes, missing=[gone], differing=[bad], nnodes=3, ranks=24), kind=peers.KIND)
    view = peers.status_view([me.pid], lambda pid, kind: server_status._fresh_record(me, kind))
    rows = view.rows
    assert [(r.node, r.rank, r.role, r.pid, r.ok) for r in rows] == [
        ("node-b (node 1)", "ranks 8-15", "node", None, True),
        ("node-c (node 2)", "ranks 16-22", "node", None, False),
        ("node-c (node 2)", "rank23", "rank", None, False),
        ("node-c (node 2)", "rank20", "rank", 78, False),
    ]
    assert rows[0].patches == ["a", "b"] and rows[1].differs == [
        "ranks 23 reported no overlay state", "ranks 20 differ: patches not enabled there: b"]  # fmt: skip
    assert rows[2].overlay is False and rows[3].differs == ["patches not enabled there: b"]
    assert view.node == {me.pid: 0} and view.detail["verdict"]["nnodes"] == 3
    record = processes.ProcessRecord.from_json({**STATUS, "pid": me.pid, "ppid": 1, "role": "main", "host": here})
    assert server_status._node(record, view.node[me.pid]) == f"{here} (node 0)"


def test_a_record_stays_the_same_size_whatever_the_number_of_ranks_per_node(tmp_path, monkeypatch):
    sizes = [len(json.dumps(_peers(0, peers.Group(f"0-{n - 1}", 0), peers.Group(f"{n}-{2 * n - 1}", 1), ranks=2 * n)))
             for n in (1, 8, 512)]  # fmt: skip
    assert max(sizes) - min(sizes) <= 12  # the digits of the ranges and the count, nothing per rank


def test_an_unreadable_peers_record_is_a_row_that_is_not_ok(tmp_path, monkeypatch):
    import psutil

    monkeypatch.setenv("SGLANG_OVERLAY_STATUS_DIR", str(tmp_path))
    me = psutil.Process()
    old = {"rank": 0, "nnodes": 2, "ranks": 2, "reports": {"one": {"host": "b"}}, "missing": [], "differing": {}}
    records.write(me.pid, old, kind=peers.KIND)  # the O(N^2) exchange's shape
    view = peers.status_view([me.pid], lambda pid, kind: server_status._fresh_record(me, kind))
    (row,) = view.rows
    assert view.detail is None and view.node == {}
    assert row.ok is False and row.pid == me.pid and "unreadable peers record" in row.differs[0]


def test_a_stale_peers_record_of_an_earlier_process_is_not_believed(tmp_path, monkeypatch):
    class Proc:  # a process started after its pid's records were written: they are an earlier process's
        pid = 4242

        @staticmethod
        def create_time():
            return time.time() + 60

    monkeypatch.setenv("SGLANG_OVERLAY_STATUS_DIR", str(tmp_path))
    records.write(Proc.pid, _peers(0, peers.Group("1", 1, "node-b")), kind=peers.KIND)
    assert server_status._fresh_record(Proc, peers.KIND) is None
