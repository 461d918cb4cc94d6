"""The sglang 0.5.23 pin through SGLang's own plugin path, in a fresh interpreter, on the real upstream.

``load_plugins()`` in a process that imports every 0.5.23 target module: each target of
``patches/pins/0.5.23/upstream.lock`` is hooked through HookRegistry (wrapped, recorded as applied),
the 0.5.20-only targets are not part of the plan, and a lock fingerprint edited by hand refuses
start-up naming the target. Collected only where sglang 0.5.23 is installed (tests/conftest.py).
"""

from __future__ import annotations

import json

from tests.support.proc import HOOK_REPORT, hook_report, run_python


def test_every_0_5_23_target_is_hooked_through_load_plugins():
    report = hook_report(run_python(HOOK_REPORT, timeout=300))
    assert report["pin"] == "0.5.23" and report["lock"].endswith("patches/pins/0.5.23/upstream.lock")
    assert report["wrapped"] and all(report["wrapped"].values()), report["wrapped"]
    applied = {path for paths in report["status"]["applied"].values() for path in paths}
    assert applied == set(report["wrapped"]), report["status"]
    assert not any("HiRadixCache" in p or "RadixCache.cache_" in p for p in applied)
    assert set(report["status"]["applied"]) == {"cp-hicache-owner-lanes", "moe-cp-compaction", "openai-abort-status"}


def test_a_drifted_fingerprint_refuses_start_up(tmp_path):
    from sglang_overlay.core import lockfile

    data = lockfile.read_lock()
    target = "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache._load_back_transfers"
    data["targets"][target]["fingerprint"] = "sha256:" + "0" * 64
    lock = tmp_path / "upstream.lock"
    lock.write_text(json.dumps(data))
    proc = run_python(HOOK_REPORT, timeout=300, SGLANG_OVERLAY_LOCK=str(lock))
    assert proc.returncode != 0
    assert "UnifiedRadixCache._load_back_transfers" in proc.stderr and "cp-hicache-owner-lanes" in proc.stderr
