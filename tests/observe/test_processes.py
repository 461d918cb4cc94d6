"""Every process, or no start: the process-start hook, the refusal without it, the INFO line, the
per-process records and ``sglang-overlay status`` (fresh interpreters, the installed environment; tier
ci_slow). The rule itself is tested in-process in tests/core/test_readiness.py.

The real-server tier (tests/e2e) shows the same on a running SGLang server with tokenizer workers;
these tests pin each mechanism down on its own."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from sglang_overlay.core import lockfile, process_hook
from tests.support.env import REPO, subprocess_env
from tests.support.proc import run_cli, run_python

pytestmark = pytest.mark.ci_slow  # fresh interpreters that import sglang: seconds each

# a target the owner-lanes patch hooks in the installed pin (0.5.23: UnifiedRadixCache)
TARGET = [e for _, e in sorted(lockfile.read_lock()["targets"].items()) if e["patch"] == "cp-hicache-owner-lanes"][-1]
TARGET_MODULE = TARGET["module"]
_OWNER, _ATTR = TARGET["qualname"].rsplit(".", 1)


def report(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("REPORT", 1)[1])


CHILD = f"""
import json, sys
import {TARGET_MODULE} as m
from sglang_overlay.core.introspection import raw_attribute
fn = raw_attribute(m.{_OWNER}, "{_ATTR}")
print("REPORT" + json.dumps({{"wrapped": hasattr(fn, "__wrapped__"),
                             "overlay": "sglang_overlay.core.hooking" in sys.modules}}))
"""


def test_the_process_hook_is_installed_in_this_environment():
    assert process_hook.installed_path() is not None, "scripts/apply_patches.sh installs it"
    proc = run_cli("process-hook", "--check", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["installed"] is True


def test_a_child_of_an_overlay_process_is_entered_at_its_first_target_import():
    """What a tokenizer worker is: a process SGLang starts without load_plugins()."""
    rep = report(run_python(CHILD, SGLANG_OVERLAY_PROCESS_START="1"))
    assert rep == {"wrapped": True, "overlay": True}


CHILD_COST = f"""
import json, sys
import {TARGET_MODULE}
from sglang_overlay.observe import startup_cost
print("REPORT" + json.dumps({{"cost": startup_cost.snapshot(), "modules": len(sys.modules)}}))
"""


def test_a_childs_import_cost_is_the_overlays_own_not_sglangs():
    """The child's overlay is imported at interpreter start (the .pth line) and applied at the first target import:
    its "import" step counts the overlay's own modules, not SGLang's, imported in between."""
    rep = report(run_python(CHILD_COST, SGLANG_OVERLAY_PROCESS_START="1"))
    assert rep["cost"]["import"]["modules"] < 100 < rep["modules"], rep


def test_any_other_process_is_left_alone():
    rep = report(run_python(CHILD))
    assert rep == {"wrapped": False, "overlay": False}


def test_the_plugin_whitelist_keeps_children_upstream_too():
    rep = report(run_python(CHILD, SGLANG_OVERLAY_PROCESS_START="1", SGLANG_PLUGINS="not_the_overlay"))
    assert rep == {"wrapped": False, "overlay": False}


def test_applying_marks_the_children():
    code = """
    import json, os
    from sglang.srt.plugins import load_plugins
    load_plugins()
    print("REPORT" + json.dumps({"mark": os.environ.get("SGLANG_OVERLAY_PROCESS_START"), "pid": os.getpid()}))
    """
    rep = report(run_python(code))
    assert rep["mark"] == str(rep["pid"])


REFUSAL = """
from sglang_overlay.core import process_hook
process_hook.installed_path = lambda: None  # an environment without the .pth hook
from sglang.srt.plugins import load_plugins
load_plugins()
print("STARTED")
"""


def test_without_the_hook_start_up_refuses_naming_processes_and_patches():
    proc = run_python(REFUSAL)
    assert proc.returncode != 0 and "STARTED" not in proc.stdout
    assert "tokenizer worker processes" in proc.stderr and "['openai-abort-status']" in proc.stderr
    assert "sglang-overlay process-hook --install" in proc.stderr


def test_a_marked_child_outside_a_server_imports_a_target_quietly():
    """The marker reaches every descendant of a server process (compile workers, a program's own children).
    Outside a server it is harmless: such a child that imports a patch-target module applies the same verified
    overlay its parent did, quietly (no INFO line: it serves nothing), and calls through to upstream."""
    proc = run_python(CHILD, SGLANG_OVERLAY_PROCESS_START="4242")
    rep = report(proc)
    assert rep == {"wrapped": True, "overlay": True}
    assert "Traceback" not in proc.stderr and "sglang-overlay: active" not in proc.stderr, proc.stderr[-2000:]


def test_without_the_hook_non_strict_warns_once_and_starts():
    proc = run_python(REFUSAL, SGLANG_OVERLAY_STRICT="0")
    assert proc.returncode == 0 and "STARTED" in proc.stdout
    assert proc.stderr.count("process-start hook") == 1


def test_one_info_line_per_process_before_logging_is_configured():
    code = """
    from sglang.srt.plugins import load_plugins
    load_plugins()
    load_plugins()
    import {TARGET_MODULE}
    """
    proc = run_python(code.format(TARGET_MODULE=TARGET_MODULE))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [l for l in proc.stderr.splitlines() if "sglang-overlay: active" in l]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "role=main" in lines[0] and "fingerprints=ok" in lines[0]
    from sglang_overlay.core.registry import discover_patches

    every = sorted(p.id for p in discover_patches(lockfile.read_pin().version))
    assert f"patches={','.join(every)}" in lines[0]


def test_the_info_line_goes_through_configured_logging():
    code = """
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="CONFIGURED %(message)s")
    from sglang.srt.plugins import load_plugins
    load_plugins()
    """
    proc = run_python(code)
    assert [l for l in proc.stdout.splitlines() if l.startswith("CONFIGURED sglang-overlay: active")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVE = f"""
import http.server, sys
from sglang.srt.plugins import load_plugins
load_plugins()
import {TARGET_MODULE}
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.BaseHTTPRequestHandler)
print("READY", flush=True)
server.serve_forever()
"""


@pytest.fixture
def served(tmp_path):
    started = []

    def start(**env):
        port = _free_port()
        env = subprocess_env(SGLANG_OVERLAY_STATUS_DIR=str(tmp_path / "records"), **env)
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()[-2000:]
        return port, env

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def status(port: int, env: dict) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "status", "--url", f"http://127.0.0.1:{port}", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_status_lists_the_serving_process_with_its_active_patches(served):
    port, env = served()
    code, rep = status(port, env)
    assert code == 0 and rep["ok"], rep
    main = rep["processes"][0]
    assert main["overlay"] and main["expected"] and main["role"] == "main"
    assert "cp-hicache-owner-lanes" in main["applied"] and TARGET_MODULE not in main["pending_modules"]


def test_status_says_when_the_overlay_is_absent(served):
    port, env = served(SGLANG_PLUGINS="not_the_overlay")
    code, rep = status(port, env)
    assert code == 1 and not rep["ok"]
    assert rep["processes"][0]["overlay"] is False and rep["processes"][0]["expected"] is True


def test_status_of_a_port_nobody_listens_on_is_a_clear_error():
    proc = run_cli("status", "--url", f"http://127.0.0.1:{_free_port()}")
    assert proc.returncode == 2 and "no local process listens on port" in proc.stderr


def test_a_record_is_removed_when_its_process_ends(tmp_path):
    code = """
    import os
    from sglang.srt.plugins import load_plugins
    load_plugins()
    print(os.getpid())
    """
    records = tmp_path / "records"
    proc = run_python(code, SGLANG_OVERLAY_STATUS_DIR=str(records))
    assert proc.returncode == 0
    time.sleep(0.1)
    assert records.is_dir() and not list(records.glob("*.json"))


def test_the_status_table_is_one_line_per_process_within_100_columns(served):
    port, env = served()
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_overlay", "status", "--url", f"http://127.0.0.1:{port}"],
        cwd=REPO,
        env={**env, "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= 100, "\n".join(lines)
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 1  # the one serving process (the header row is drawn with heavy lines)
    cells = [c.strip() for c in rows[0].strip("│").split("│")]
    assert cells[0] == socket.gethostname() and cells[1:3] == ["-", "main"] and cells[4] == "yes"
    assert cells[5] == "#1" and "live patches: #1 cp-hicache-owner-lanes" in proc.stdout  # only what is hooked there
