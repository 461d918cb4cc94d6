"""Patch moe-cp-compaction: only valid rows reach the DeepSeek-V2 sparse MoE under CP.

Root (every release): ``layout.py``, ``producers.py``, ``batch_layout.py`` (the host-side valid-row layout
and how a forward carries it), ``rows.py`` and ``boundary.py`` (compaction, restore, the shared boundary),
``refusals.py`` (shared start-up refusals), ``op_path.py`` (the ``op_gate`` hook), ``errors.py``.
Release folder: ``forward_context/`` (sglang >=0.5.23).
Description and exit condition: ``patches/moe-cp-compaction.md``.
"""

from sglang_overlay.core.registry import Patch, Target

PATCH = Patch(
    id="moe-cp-compaction",
    position=2,
    title="DeepSeek-V2 MoE: compact CP-local valid rows before sparse MoE, restore the padded layout after",
    description="moe-cp-compaction.md",
    process="scheduler",
    probe=f"{__name__}.probe:probe",
    targets=(
        Target(
            "sglang.srt.models.deepseek_v2",
            "DeepseekV2MoE.op_gate",
            f"{__name__}.op_path:refuse_dummy_rows_in_op_path",
            "BEFORE",
        ),
    ),
)
