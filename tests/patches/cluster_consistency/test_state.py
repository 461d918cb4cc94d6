"""What a rank reports about its overlay and how two reports differ (``state.py``: pure, no store)."""

from __future__ import annotations

from sglang_overlay.patches.cluster_consistency.state import COMPARED, differences, local_state


def test_the_report_is_this_processes_declared_overlay(monkeypatch):
    mine = local_state(0)
    assert "cluster-consistency" in mine["patches"] and mine["strict"] is True
    monkeypatch.setenv("SGLANG_OVERLAY_DISABLE", "moe-cp-compaction")
    assert "moe-cp-compaction" not in local_state(0)["patches"]
    assert differences(mine, local_state(0)) == ["patches not enabled there: moe-cp-compaction"]
    assert set(COMPARED) <= set(mine) and differences(mine, {**mine, "host": "x", "pid": 1, "node": 7}) == []


def test_a_patch_enabled_on_another_rank_only_is_named_as_such():
    mine = local_state(0)
    extra = {**mine, "patches": [*mine["patches"], "zz-extra", "zz-other"]}
    fewer = {**mine, "patches": [p for p in mine["patches"] if p not in ("moe-cp-compaction", "openai-abort-status")]}
    assert differences(mine, extra) == ["patches enabled there only: zz-extra, zz-other"]
    assert differences(mine, fewer) == ["patches not enabled there: moe-cp-compaction, openai-abort-status"]
    both = {**mine, "patches": [*fewer["patches"], "zz-extra"]}
    assert differences(mine, both) == [
        "patches not enabled there: moe-cp-compaction, openai-abort-status; enabled there only: zz-extra"
    ]


def test_a_rank_names_itself_by_its_process_title_or_by_nothing(monkeypatch):
    import os
    import sys

    assert "title" in local_state(0) and local_state(0)["pid"] == os.getpid()
    monkeypatch.setitem(sys.modules, "setproctitle", None)  # not installed: the import fails
    assert local_state(0)["title"] == ""
