"""The "still needed?" probe of moe-cp-compaction on the installed pin's real top-k padding mask and real
``DeepseekV2MoE.forward_deepep``: the single record of what upstream's MoE boundary does to CP padding rows
(the boundary tests assert the patched path only). Upstream changed by ``monkeypatch`` shows each half can
say "fixed upstream" and "cannot tell", so the probe is not a constant."""

from __future__ import annotations

import pytest

from sglang_overlay.core.installed import installed_sglang_version
from sglang_overlay.core.needed import run_probe
from sglang_overlay.core.registry import CANNOT_TELL, FIXED_UPSTREAM, NEEDED, discover_patches
from sglang_overlay.patches.moe_cp_compaction import probe as moe_probe


def test_upstream_masks_a_suffix_and_hands_gate_and_top_k_the_dummy_rows():
    patch = next(p for p in discover_patches(installed_sglang_version()) if p.id == "moe-cp-compaction")
    found, _ = run_probe(patch.probe)
    assert found.verdict == NEEDED, found
    assert "valid rows [0, 1, 3, 4] of 6" in found.evidence
    assert "it drops valid rows [4] and lets dummy rows [2] reach top-k" in found.evidence
    assert "forward_deepep hands every row to gate and top-k (gate 6, shared experts 6, top-k 6 of 6 rows" in (
        found.evidence
    )


@pytest.fixture
def upstream_moe():
    from sglang.srt.models.deepseek_v2 import DeepseekV2MoE

    return DeepseekV2MoE


def test_a_boundary_that_localizes_the_padding_is_fixed_upstream_and_the_mask_still_needed(monkeypatch, upstream_moe):
    original = upstream_moe.forward_deepep

    def localized(self, hidden_states, forward_batch, input_ids_global=None):
        valid = int(forward_batch.num_token_non_padded)  # as if upstream took only the valid rows
        return original(self, hidden_states[:valid], forward_batch, input_ids_global)

    monkeypatch.setattr(upstream_moe, "forward_deepep", localized)
    found = moe_probe.probe()
    assert found.verdict == NEEDED and "top-k padding mask keeps a prefix" in found.evidence
    assert "forward_deepep" not in found.evidence  # that half is fixed: only the mask's bug is said


def test_both_halves_fixed_is_fixed_upstream(monkeypatch, upstream_moe):
    monkeypatch.setattr(moe_probe, "_mask_half", lambda layout, valid: (FIXED_UPSTREAM, "the mask keeps valid rows"))

    def localized(self, hidden_states, forward_batch, input_ids_global=None):
        self.gate(hidden_states[: int(forward_batch.num_token_non_padded)])
        self.topk(hidden_states[: int(forward_batch.num_token_non_padded)], None)

    monkeypatch.setattr(upstream_moe, "forward_deepep", localized)
    found = moe_probe.probe()
    assert found.verdict == FIXED_UPSTREAM, found
    assert "hands gate and top-k only the 4 valid rows" in found.evidence


def test_a_boundary_that_needs_more_of_its_module_cannot_tell(monkeypatch, upstream_moe):
    def reads_more(self, hidden_states, forward_batch, input_ids_global=None):
        return self.new_router(hidden_states)

    monkeypatch.setattr(upstream_moe, "forward_deepep", reads_more)
    monkeypatch.setattr(moe_probe, "_mask_half", lambda layout, valid: (FIXED_UPSTREAM, "the mask keeps valid rows"))
    found = moe_probe.probe()
    assert found.verdict == CANNOT_TELL and "needs more than gate/top-k now (AttributeError" in found.evidence
