"""scripts/bench_owner_lanes.py run in a subprocess, for the tests of its command line on every release."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO, subprocess_env

BENCH = REPO / "scripts" / "bench_owner_lanes.py"


def run_bench(cwd, *args, timeout=600):
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
