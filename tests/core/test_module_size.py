"""Size: no Python module of the project over 300 lines (the package, the GSM8K runner, scripts, tests, nox).

A module past the limit is read as two jobs in one file: split it by what its parts do (the tests by what
they prove, fixtures into a conftest.py, helpers into a support module). Cost: reads every module git lists
(tracked, or new and not ignored) once.
"""

from __future__ import annotations

import subprocess

from tests.support.env import REPO

LIMIT = 300


def test_no_module_over_the_limit():
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    files = [REPO / f for f in listed if (REPO / f).is_file()]  # tracked or not ignored, as the working tree has it
    sizes = {str(f.relative_to(REPO)): len(f.read_text(encoding="utf-8").splitlines()) for f in files}
    assert len(sizes) > 100, "git ls-files listed too few modules to be this checkout"
    over = {f: n for f, n in sorted(sizes.items()) if n > LIMIT}
    assert not over, f"modules over {LIMIT} lines (split each by what its parts do): {over}"
