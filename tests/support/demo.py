"""The throw-away demo patch (``tests/support/demo_patch.py``) as the core's fresh-interpreter tests use it:
its declaration module, its one target, and the environment that adds it to a process's series.

Invariant: the demo patch is an extra (``SGLANG_OVERLAY_EXTRA_PATCHES``), never in the shipped series.
Cost: none (names and a dict).
"""

DEMO = "tests.support.demo_patch"
DEMO_TARGET = "sglang.srt.mem_cache.radix_cache.RadixKey.page_aligned"


def demo_env(lock, **extra):
    return {"SGLANG_OVERLAY_EXTRA_PATCHES": DEMO, "SGLANG_OVERLAY_LOCK": str(lock), **extra}
