"""Fixtures shared by the core's tests: the lock extended with the demo patch (``tests/support/demo.py``)."""

import json

import pytest

from tests.support.demo import DEMO, DEMO_TARGET
from tests.support.proc import run_cli


@pytest.fixture(scope="module")
def demo_lock(tmp_path_factory):
    """A copy of the shipped lock extended with the demo patch's fingerprint."""
    path = tmp_path_factory.mktemp("lock") / "upstream.lock"
    from sglang_overlay.core import lockfile

    path.write_text(lockfile.default_lock_path().read_text())
    proc = run_cli("lock", "--include-extra", SGLANG_OVERLAY_EXTRA_PATCHES=DEMO, SGLANG_OVERLAY_LOCK=str(path))
    assert proc.returncode == 0, proc.stderr
    assert DEMO_TARGET in json.loads(path.read_text())["targets"]
    return path
