"""The "still needed?" probe of cluster-consistency: upstream's own plugin loading, two ranks with different plugins.

Invariant: the probe leaves no trace (environment, ``sys.path``, upstream's loaded flag, the default group), and its
verdict flips to fixed upstream on the observation it looks for. Cost: one probe run (about 5 s), the rest pure.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sglang_overlay.core.installed import installed_sglang_version
from sglang_overlay.core.needed import run_probe
from sglang_overlay.core.registry import CANNOT_TELL, FIXED_UPSTREAM, NEEDED, discover_patches
from sglang_overlay.patches.cluster_consistency.probe import DISTRIBUTED, RANKS, _crossings, decide

ONE_EACH = [[r] for r in RANKS]


def test_upstream_lets_two_ranks_with_different_plugins_start_unnoticed():
    import sglang.srt.plugins as plugins
    import torch.distributed as dist

    patch = next(p for p in discover_patches(installed_sglang_version()) if p.id == "cluster-consistency")
    before = (list(sys.path), os.environ.get("SGLANG_PLUGINS"), plugins._plugins_loaded, dist.is_initialized())
    found, _ = run_probe(patch.probe)
    assert found.verdict == NEEDED, found
    assert f"ran {RANKS[0]} on one rank and {RANKS[1]} on the other" in found.evidence
    assert "0 keys added to its rendezvous store" in found.evidence and "none of 3 modules" in found.evidence
    assert (sys.path, os.environ.get("SGLANG_PLUGINS"), plugins._plugins_loaded, dist.is_initialized()) == before
    assert "overlay_probe_ranks" not in sys.modules


def test_the_verdict_flips_when_upstream_compares_plugins_over_the_store():
    assert decide(ONE_EACH, [], [], 3, []).verdict == NEEDED
    key = decide(ONE_EACH, ["sglang/plugins/rank0"], [], 3, [])
    assert key.verdict == FIXED_UPSTREAM and "sglang/plugins/rank0" in key.evidence
    gather = decide(ONE_EACH, [], ["sglang.srt.plugins: all_gather_object"], 3, [])
    assert gather.verdict == FIXED_UPSTREAM and "all_gather_object" in gather.evidence
    assert decide(ONE_EACH, [], [], 3, ["store"]).verdict == FIXED_UPSTREAM
    assert decide(ONE_EACH, [], [], 3, ["force"]).verdict == NEEDED  # an unrelated parameter is no comparison
    assert decide([[RANKS[0]], []], [], [], 3, []).verdict == CANNOT_TELL


def test_the_scan_sees_torch_distributed_where_it_is_used(tmp_path: Path):
    """The scan is not blind: a module that gathers over torch.distributed is named, a plain one is not."""
    (tmp_path / "gathers.py").write_text("import torch.distributed as dist\ndist.all_gather_object([], 1)\n")
    (tmp_path / "plain.py").write_text("import logging\n")
    files = {m: (tmp_path / f"{m}.py", DISTRIBUTED) for m in ("gathers", "plain", "missing")}
    assert _crossings(files) == (["gathers: all_gather_object", "gathers: torch.distributed"], 2)
