"""Test-only patch that proves the machinery on a real upstream function.

It hooks ``RadixKey.page_aligned`` in ``sglang.srt.mem_cache.radix_cache`` (a
module ``load_plugins()`` does not import by itself) with an AROUND hook that
counts calls and returns upstream's own result. Enabled only through
``SGLANG_OVERLAY_EXTRA_PATCHES=tests.support.demo_patch``.
"""

from sglang_overlay.core.registry import Patch, Target

CALLS = {"page_aligned": 0}

PATCH = Patch(
    id="demo-radix-key",
    title="Test-only: count RadixKey.page_aligned calls",
    description="(test-only)",
    process="scheduler",
    targets=(
        Target(
            module="sglang.srt.mem_cache.radix_cache",
            qualname="RadixKey.page_aligned",
            hook="tests.support.demo_patch:count_page_aligned",
            hook_type="AROUND",
        ),
    ),
)


def count_page_aligned(original, *args, **kwargs):
    CALLS["page_aligned"] += 1
    return original(*args, **kwargs)
