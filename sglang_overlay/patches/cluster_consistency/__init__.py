"""Patch cluster-consistency: every rank of every node runs the same overlay, or the job does not start.

Root (every release): ``state.py`` (what a rank reports, and how two reports differ), ``exchange.py`` (the
reports through the job's own rendezvous store: O(N) requests per job, a bounded wait), ``verdict.py`` (the one
verdict every rank receives, and the refusal), ``peers.py`` (the record a rank keeps of the verdict, its schema, and what ``status`` shows of it),
``settings.py`` (its knob), ``probe.py`` (still needed: does
upstream compare the plugins across ranks itself?).
Release folder (where the process group exists): ``parallel_runtime/`` (sglang >=0.5.23). Description and exit condition: ``patches/cluster-consistency.md``.
"""

from sglang_overlay.core.registry import Patch
from sglang_overlay.patches.cluster_consistency.settings import WAIT_S

PATCH = Patch(
    id="cluster-consistency",
    position=4,
    title="Every rank of every node reports its overlay state through the job's rendezvous store; "
    "a missing or different rank refuses start-up",
    description="cluster-consistency.md",
    process="scheduler",
    knobs=(WAIT_S,),
    probe="sglang_overlay.patches.cluster_consistency.probe:probe",
    status_view="sglang_overlay.patches.cluster_consistency.peers:status_view",
)
