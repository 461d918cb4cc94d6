"""The overlay's own start-up cost per process (``observe.startup_cost``): what a step cost, kept in the record."""

from __future__ import annotations

import subprocess
import sys

from tests.support.env import REPO, subprocess_env


def test_a_step_counts_its_calls_and_the_modules_it_imported(monkeypatch):
    from sglang_overlay.observe import startup_cost

    monkeypatch.setattr(startup_cost, "_SPANS", {})
    sys.modules.pop("colorsys", None)
    for _ in range(2):
        with startup_cost.span("step"):
            import colorsys  # noqa: F401  (a module nothing here had imported)
    (step,) = startup_cost.snapshot().values()
    assert step["count"] == 2 and step["modules"] == 1 and step["wall_ms"] >= 0


def test_a_fresh_process_keeps_its_import_and_apply_cost_in_its_record(tmp_path):
    """In a fresh interpreter, as SGLang's load_plugins() enters the overlay: the record holds both steps."""
    code = (
        "import json; from sglang_overlay import plugin; plugin.load();"
        "import os; from sglang_overlay.observe import processes;"
        "print(json.dumps(processes.read_record(os.getpid()).startup))"
    )
    env = {**subprocess_env(), "SGLANG_OVERLAY_STATUS_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    startup = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert startup["import"]["count"] == 2 and startup["import"]["modules"] > 0  # the package, then the plugin module
    assert startup["apply"]["count"] == 1 and startup["apply"]["cpu_ms"] > 0
