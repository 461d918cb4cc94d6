"""``layout_of`` and ``cp_padding_layout`` on upstream's own CP metadata of sglang < 0.5.23 (its strategies,
``pad_logical_token_to_physical``, ``attn_cp_size`` / ``attn_cp_rank`` overrides). The cache of ``layout_of``
on every release: tests/patches/moe_cp_compaction/test_batch_layout.py."""

import pytest

from sglang_overlay.patches.moe_cp_compaction.batch_layout import layout_of
from sglang_overlay.patches.moe_cp_compaction.producers import cp_padding_layout

# ----------------------------------------------------------------- upstream's CP padding


@pytest.fixture(scope="module")
def cp():
    from tests.support.runtime import publish_cpu_runtime

    publish_cpu_runtime()
    from sglang.srt.layers.cp.interleave import InterleaveCPStrategy
    from sglang.srt.layers.cp.padding import pad_logical_token_to_physical
    from sglang.srt.layers.cp.zigzag import ZigzagCPStrategy
    from sglang.srt.runtime_context import get_parallel

    return dict(
        strategies=(InterleaveCPStrategy, ZigzagCPStrategy),
        pad=pad_logical_token_to_physical,
        parallel=get_parallel,
    )


@pytest.mark.parametrize("lens", [[7, 9, 2], [16], [40, 8, 8, 1]])
@pytest.mark.parametrize("n", [2, 4])
def test_cp_padding_layout_from_upstream_metadata(cp, lens, n):
    """Upstream pads each rank's rows at the end: the layout keeps the logical rows."""
    from types import SimpleNamespace

    for strategy_cls in cp["strategies"]:
        with cp["parallel"]().override(attn_cp_size=n, attn_cp_rank=0):
            metadata = strategy_cls(cp_size=n).build_metadata(sum(lens), lens, lens)
            cp["pad"](metadata)
        for r in range(n):
            layout = cp_padding_layout(metadata, r)
            assert layout.num_rows == metadata.per_rank_actual_token[r]
            assert layout.row_indices().tolist() == list(range(metadata.per_rank_logical_token[r]))
            batch = SimpleNamespace(attn_cp_metadata=metadata)
            with cp["parallel"]().override(attn_cp_rank=r):
                first = layout_of(batch)
                assert layout_of(batch) is first  # cached for every later MoE layer
            assert first.row_indices().tolist() == layout.row_indices().tolist()
