"""Shared fixture of the moe-cp-compaction tests on sglang >= 0.5.23: upstream's own ``DeepseekV2MoE`` with
DeepEP stand-ins (tests/patches/moe_cp_compaction/forward_context/standins.py) and a record of the bound top-k reads."""

import pytest

from tests.patches.moe_cp_compaction.forward_context.standins import build_moe, upstream_forward_deepep


@pytest.fixture(scope="module")
def moe():
    layer, rec = build_moe()
    bounds = []

    def on_topk(module, args, kwargs):
        """The bound top-k resolves (``resolve_routing_inputs``: the forward context's getter)."""
        from sglang.srt.model_executor.forward_context import get_forward_context, has_forward_context

        get_bound = get_forward_context().moe_num_token_non_padded if has_forward_context() else None
        bound = None if get_bound is None else get_bound()
        bounds.append(None if bound is None else int(bound))

    layer.topk.register_forward_pre_hook(on_topk, with_kwargs=True)
    return dict(layer=layer, rec=rec, bounds=bounds, upstream=upstream_forward_deepep())
