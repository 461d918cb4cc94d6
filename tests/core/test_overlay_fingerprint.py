"""Fingerprints and the lock's per-module seal, on a small module written by the test."""

from __future__ import annotations

import importlib
import sys

import pytest

from sglang_overlay.core import fingerprint, lockfile
from sglang_overlay.core.framework import Owner
from sglang_overlay.core.registry import Patch, Target
from sglang_overlay.core.verify import target_status

SOURCE = '''
class Cache:
    def evict(self, n):
        """Evict n."""
        return n  # upstream comment


def helper(x):
    return x + 1
'''


@pytest.fixture()
def upstream_module(tmp_path, monkeypatch):
    pkg = tmp_path / "fakeupstream"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cache.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    fingerprint.installed_file_digest.cache_clear()
    yield pkg / "cache.py"
    fingerprint.installed_file_digest.cache_clear()
    sys.modules.pop("fakeupstream", None)


PATCH = Patch(
    id="fake",
    title="t",
    description="-",
    process="any",
    targets=(Target("fakeupstream.cache", "Cache.evict", "x:y"), Target("fakeupstream.cache", "helper", "x:z")),
)
PIN = lockfile.Pin("sglang", "0", "t", "tv", {"3.11": {"file": "w", "sha256": "s"}})


def lock_now():
    return lockfile.build_lock(
        [Owner(PATCH.id, PATCH.targets)], PIN, fingerprint.fingerprint_installed, fingerprint.installed_file_digest
    )


def statuses(lock):
    fingerprint.installed_file_digest.cache_clear()
    return [target_status(PATCH.id, t, lock).status for t in PATCH.targets]


def test_unchanged_file_matches_without_parsing(upstream_module, monkeypatch):
    lock = lock_now()
    calls = []
    monkeypatch.setattr(fingerprint, "fingerprint_installed", lambda *a: calls.append(a) or "never")
    assert statuses(lock) == ["match", "match"]
    assert calls == []  # the seal held: no AST work at start-up


def test_comment_and_formatting_changes_still_match_through_the_ast(upstream_module):
    lock = lock_now()
    upstream_module.write_text(
        SOURCE.replace("# upstream comment", "# reworded").replace("return x + 1", "return (x + 1)")
    )
    assert statuses(lock) == ["match", "match"]


def test_a_changed_body_is_drift_only_for_that_target(upstream_module):
    lock = lock_now()
    upstream_module.write_text(SOURCE.replace("return n", "return n * 2"))
    assert statuses(lock) == ["drift", "match"]


def test_a_hand_edited_fingerprint_breaks_the_seal(upstream_module):
    lock = lock_now()
    lock["targets"]["fakeupstream.cache.helper"]["fingerprint"] = "sha256:" + "0" * 64
    assert statuses(lock) == ["match", "drift"]


def test_a_removed_target_is_missing(upstream_module):
    lock = lock_now()
    upstream_module.write_text(SOURCE.replace("def helper(x):\n    return x + 1\n", ""))
    fingerprint.installed_file_digest.cache_clear()
    result = [target_status(PATCH.id, t, lock) for t in PATCH.targets]
    assert [r.status for r in result] == ["match", "missing"]
    assert "no definition of 'helper'" in result[1].detail


def test_fingerprint_source_finds_nested_definitions_and_refuses_bad_source():
    assert fingerprint.fingerprint_source(SOURCE, "Cache.evict").startswith("sha256:")
    with pytest.raises(fingerprint.TargetNotFound):
        fingerprint.fingerprint_source(SOURCE, "Cache.missing")
    with pytest.raises(fingerprint.TargetNotFound):
        fingerprint.fingerprint_source("def (:", "x")
