"""The one readiness rule (``core.readiness.ready``), in-process: what start-up, ``check`` and ``launch`` refuse.

The fresh-interpreter view of the same rule (a real ``load_plugins()`` refusing) is tests/observe/test_processes.py
(tier ci_slow); here each case of the rule runs against the real lock and the installed sglang's sources.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from sglang_overlay import cli
from sglang_overlay.cli import check as cli_check
from sglang_overlay.core import lockfile, process_hook, readiness, verify
from sglang_overlay.observe.server_status import _is_server_process


class _Plan(verify.Plan):
    """A plan with only the patches' process kinds (the hook rule reads nothing else)."""

    def __init__(self, *kinds: str):
        super().__init__([SimpleNamespace(id=f"p-{kind}", process=kind) for kind in kinds], {}, [], None)


@pytest.fixture
def no_hook(monkeypatch):
    monkeypatch.setattr(process_hook, "installed_path", lambda: None)
    monkeypatch.delenv("SGLANG_OVERLAY_PROCESS_START", raising=False)


LAUNCH = ["/venv/lib/python3.12/site-packages/sglang/launch_server.py", "--model-path", "m"]


@pytest.mark.parametrize("argv", [LAUNCH + ["--tokenizer-worker-num", "2"], LAUNCH + ["--tokenizer-worker-num=4"],
                                  LAUNCH + ["--config", "c.yaml"], ["-c"], ["my_program.py"], []])  # fmt: skip
def test_without_the_hook_a_launch_that_may_start_tokenizer_workers_is_refused(no_hook, argv):
    """Refused where tokenizer workers could run an HTTP-process patch unpatched: more than one asked for, or a
    command line that does not say (a config file, an embedding program, ``check``); the message names both."""
    problem = readiness.process_hook_problem(_Plan("scheduler", "http"), "http", argv)
    assert "tokenizer worker processes" in problem and "['p-http']" in problem and "p-scheduler" not in problem
    assert problem in readiness.ready(_Plan("scheduler", "http"), "http", argv)


@pytest.mark.parametrize("plan, role, argv", [
    (_Plan("scheduler", "http"), "http", LAUNCH),  # one tokenizer worker: SGLang's default
    (_Plan("scheduler", "http"), "http", LAUNCH + ["--tokenizer-worker-num", "1"]),
    (_Plan("scheduler", "http"), "http", ["/venv/bin/sglang", "serve", "--model-path", "m"]),
    (_Plan("scheduler", "http"), "scheduler", LAUNCH + ["--tokenizer-worker-num", "2"]),  # starts no worker
    (_Plan("scheduler", "http"), "detokenizer", ["-c"]),
    (_Plan("scheduler"), "http", LAUNCH + ["--tokenizer-worker-num", "2"]),  # no patch of the HTTP process
])  # fmt: skip
def test_without_the_hook_nothing_is_refused_where_no_such_process_can_exist(no_hook, plan, role, argv):
    assert readiness.process_hook_problem(plan, role, argv) is None
    assert readiness.ready(plan, role, argv) == []


def test_a_marked_child_needs_no_hook_of_its_own(no_hook, monkeypatch):
    monkeypatch.setenv("SGLANG_OVERLAY_PROCESS_START", "4242")
    assert readiness.process_hook_problem(_Plan("http"), "http", ["-c"]) is None


def _drifted_lock() -> tuple[dict, str, str]:
    lock = copy.deepcopy(lockfile.read_lock())
    path, entry = sorted(lock["targets"].items())[0]
    entry["fingerprint"] = "sha256:" + "0" * 64
    return lock, path, entry["patch"]


def test_the_shipped_lock_is_ready_at_start_up():
    assert readiness.ready(verify.make_plan(), role="scheduler") == []


def test_a_drifted_fingerprint_is_one_refusal_naming_patch_target_and_the_way_out():
    lock, path, patch = _drifted_lock()
    problems = readiness.ready(verify.make_plan(lock), role="scheduler")
    assert len(problems) == 1 and path in problems[0] and f"patch '{patch}'" in problems[0]
    assert f"SGLANG_OVERLAY_DISABLE={patch}" in problems[0] and "rebase-check" in problems[0]


def test_a_disabled_patch_is_not_verified(monkeypatch):
    lock, _, patch = _drifted_lock()
    monkeypatch.setenv("SGLANG_OVERLAY_DISABLE", patch)
    assert readiness.ready(verify.make_plan(lock), role="scheduler") == []


def test_another_release_is_one_problem_and_no_target_is_read(monkeypatch):
    lock = copy.deepcopy(lockfile.read_lock())
    lock["upstream"]["version"] = "0.0.1"
    plan = verify.make_plan(lock)
    assert plan.statuses == {} and readiness.ready(plan) == [plan.version_problem]
    assert "does not support the installed sglang" in plan.version_problem


def test_check_and_launch_refuse_what_the_rule_refuses(no_hook):
    """``check`` knows no launch command line (workers not told: the hook's absence counts); ``launch`` reads
    its own arguments; both are the rule with ``environment=True``."""
    plan = verify.make_plan()
    report = cli_check._check_report(plan, [])
    assert report["ok"] is False and any("process-start hook" in p for p in report["readiness"])
    assert cli_check._check_report(plan, ["sglang-overlay", "--model-path", "m"])["readiness"] == readiness.ready(
        plan, argv=["sglang-overlay", "--model-path", "m"], environment=True
    )


def test_a_whitelist_without_the_overlay_is_a_launch_problem(monkeypatch):
    monkeypatch.setenv("SGLANG_PLUGINS", "someone_else")
    problems = readiness.ready(verify.make_plan(), role="scheduler", environment=True)
    assert any("does not name 'sglang_overlay'" in p for p in problems), problems


@pytest.mark.parametrize("title, server", [
    ("/r/.venv/bin/python -m sglang.launch_server --model-path m --port 30000", True),
    ("/r/.venv/bin/sglang serve --model-path m", True),
    ("sglang::scheduler_TP0", True),
    ("sglang::tokenizer_worker:4242", True),
    ("/r/.venv/bin/python3 scripts/demo.py --tokenizer-worker-num 2", False),
    ("/r/.venv/bin/python3 /r/.venv/bin/sglang-overlay launch --model-path m", False),
    ("/r/.venv/bin/python -m pytest tests/e2e -m e2e", False),
])  # fmt: skip
def test_status_takes_only_sglang_server_processes_for_the_servers_top(title, server):
    """The demo starts the server as its child: the demo process must not be taken for the server's main
    process (it was, and was reported ABSENT)."""
    assert _is_server_process(title) is server


def _drifted_dependency() -> tuple[dict, str, dict]:
    lock = copy.deepcopy(lockfile.read_lock())
    path, entry = sorted(lock["dependencies"].items())[0]
    entry["fingerprint"] = "sha256:" + "0" * 64
    return lock, path, entry


def test_a_changed_dependency_refuses_naming_it_and_the_hook_module_that_needs_it():
    """A definition a hook calls without hooking it changed: refused at start-up, not inside the scheduler."""
    lock, path, entry = _drifted_dependency()
    problems = readiness.ready(verify.make_plan(lock), role="scheduler")
    assert len(problems) == 1, problems
    assert f"dependency {path}" in problems[0] and entry["needed_by"] in problems[0] and "not hooked" in problems[0]
    assert "fingerprint drift" in problems[0]


def test_a_dependency_gone_from_upstream_is_missing(monkeypatch):
    from sglang_overlay.core import fingerprint

    lock, path, entry = _drifted_dependency()
    real = fingerprint.fingerprint_installed

    def without(module, qualname):
        if f"{module}.{qualname}" == path:
            raise fingerprint.TargetNotFound(f"{qualname!r}: no definition")
        return real(module, qualname)

    monkeypatch.setattr(fingerprint, "fingerprint_installed", without)
    (problem,) = readiness.ready(verify.make_plan(lock), role="scheduler")
    assert f"dependency {path}" in problem and "missing in the installed upstream" in problem


def test_check_lists_dependencies_beside_targets():
    report = cli_check._check_report(verify.make_plan(), ["sglang-overlay"])
    locked = lockfile.read_lock()["dependencies"]
    assert {r["target"] for r in report["dependencies"]} == set(locked)
    assert {r["fingerprint"] for r in report["dependencies"]} == {"match"}


def test_rebase_check_reports_a_changed_dependency(tmp_path):
    """A wheel whose copy of one dependency's module has that definition changed: the dependency is
    ``drift`` (check's word), with the hook module that needs it; targets elsewhere are reported apart."""
    import ast
    import zipfile

    from sglang_overlay.core import fingerprint, rebase

    for path, entry in sorted(lockfile.read_lock()["dependencies"].items()):  # the first that is a function
        source = fingerprint.module_source_path(entry["module"]).read_text(encoding="utf-8")
        node = fingerprint.find_definition(ast.parse(source), entry["qualname"])
        if isinstance(node, ast.FunctionDef):
            break
    lines = source.splitlines(keepends=True)
    lines.insert(node.end_lineno, " " * node.body[0].col_offset + "_sglang_overlay_rebase_probe = None\n")
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(fingerprint.module_file_in_wheel(entry["module"]), "".join(lines))
    lock = lockfile.read_lock()
    patches = verify.declared_patches(lockfile.read_pin().version)
    owners = verify.locked_owners(lock, patches)
    rows = {r.target.path: r for r in rebase.report(wheel, owners, dependencies=True)}
    assert rows[path].status is verify.Status.DRIFT and rows[path].target.needed_by == entry["needed_by"]


def test_a_module_that_is_a_package_is_found_in_a_wheel_as_its_init():
    from sglang_overlay.core.fingerprint import module_file_in_wheel

    assert module_file_in_wheel("sglang.srt.layers.cp.bcg", {"sglang/srt/layers/cp/bcg/__init__.py"}) == (
        "sglang/srt/layers/cp/bcg/__init__.py"
    )
    assert module_file_in_wheel("sglang.srt.x", {"sglang/srt/x.py", "sglang/srt/x/__init__.py"}) == "sglang/srt/x.py"


@pytest.mark.ci_slow  # reads the pin's whole sglang wheel
def test_the_installed_pins_own_wheel_changes_no_target_and_no_dependency():
    """``rebase-check`` against the wheel ``scripts/apply_patches.sh`` installed (sha256-verified, cached): every
    target and every dependency is found and matches, so a ``drift`` elsewhere means upstream changed."""
    import os
    from pathlib import Path

    from sglang_overlay.core import installed, rebase

    pin = lockfile.read_pin()
    cache = Path(os.environ.get("SGLANG_OVERLAY_WHEEL_CACHE", Path.home() / ".cache/sglang-overlay/wheels"))
    wheel = cache / pin.wheels[installed.running_python()]["file"]
    assert wheel.is_file(), f"{wheel}: scripts/apply_patches.sh caches the pin's wheel there"
    owners = verify.locked_owners(lockfile.read_lock(), verify.declared_patches(pin.version))
    rows = rebase.report(wheel, owners) + rebase.report(wheel, owners, dependencies=True)
    assert rows and all(r.ok for r in rows), [r.describe() for r in rows if not r.ok]
    assert any(r.is_dependency for r in rows) and any(r.patch == "sglang-plugin-framework" for r in rows)


def _only_rule(monkeypatch, problem: readiness.Problem) -> None:
    monkeypatch.setattr(readiness, "RULES", [readiness.Rule("test", lambda plan, role, argv: [problem])])


def test_a_rule_added_to_ready_refuses_start_up_check_and_launch_alike(monkeypatch, capsys):
    """The one rule: a rule added to ``readiness.RULES`` reaches the plugin at start-up (before anything is
    hooked), ``check`` (exit 1, the message printed) and ``launch`` (exit 2, SGLang's launcher never run)."""
    from sglang_overlay import plugin
    from sglang_overlay.core import hooking
    from sglang_overlay.errors import OverlayStartupError

    message = "a rule this test added: refused"
    added = readiness.Rule("test", lambda plan, role, argv: [readiness.Problem(message)])
    monkeypatch.setattr(readiness, "RULES", [*readiness.RULES, added])
    monkeypatch.setattr(hooking, "_STATE", hooking._State())  # this process's own state stays untouched
    monkeypatch.setattr(process_hook, "installed_path", lambda: "/hook.pth")  # only the added rule objects
    monkeypatch.setattr(cli_check.os, "execv", lambda *a: pytest.fail("launch ran SGLang's launcher"))
    with pytest.raises(OverlayStartupError, match=message):
        plugin.load()
    assert hooking.status()["started"] is False and hooking.status()["applied"] == {}
    assert cli.main(["check"]) == 1 and message in capsys.readouterr().out
    assert cli.main(["launch", "--model-path", "m"]) == 2
    assert message in capsys.readouterr().out


def test_non_strict_warns_on_a_launch_problem_and_refuses_a_fatal_one(monkeypatch, caplog):
    """The reactions differ, the rule does not: non-strict, a problem of no patch is one warning (start-up goes
    on), a fatal one is refused all the same. (Every patch disabled: nothing is hooked in this process.)"""
    from sglang_overlay.core import hooking
    from sglang_overlay.errors import OverlayError

    monkeypatch.setenv("SGLANG_OVERLAY_STRICT", "0")
    monkeypatch.setenv("SGLANG_OVERLAY_DISABLE", ",".join(p.id for p in verify.make_plan().patches))
    monkeypatch.setattr(hooking, "_STATE", hooking._State())
    monkeypatch.setattr(hooking.process_hook, "mark_children", lambda: None)
    _only_rule(monkeypatch, readiness.Problem("warn me"))
    hooking._apply_unlocked(None)
    assert hooking._STATE.started and "warn me" in caplog.text
    monkeypatch.setattr(hooking, "_STATE", hooking._State())
    _only_rule(monkeypatch, readiness.Problem("refuse me", fatal=True))
    with pytest.raises(OverlayError, match="refuse me"):
        hooking._apply_unlocked(None)


def test_this_environment_imports_the_installed_sglang():
    """The control of tests/core/test_sglang_identity.py: here, one install record owns what imports."""
    from sglang_overlay.core import installed

    found = installed.sglang_identity()
    assert len(found.records) == 1 and found.others == [] and installed.identity_problem(found) is None
    assert installed.describe(found).endswith(f"(installed by {found.records[0].name})")
