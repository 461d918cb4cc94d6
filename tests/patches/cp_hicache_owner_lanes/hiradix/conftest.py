"""Shared fixture of the hiradix owner-lane tests: the overlay applied in-process, checked hooked.

Not autouse: a module asks for it (``pytestmark = pytest.mark.usefixtures("overlay")``), so the tests that
must run upstream bare (``test_probe.py``) or on stand-ins stay as they are. Cost: one ``apply()`` per module.
"""

from __future__ import annotations

import pytest

import sglang_overlay


@pytest.fixture(scope="module")
def overlay():
    """The overlay applied, HiRadixCache.load_back hooked (asked for by each module's ``pytestmark``)."""
    sglang_overlay.apply()
    from sglang.srt.mem_cache.hiradix_cache import HiRadixCache

    assert hasattr(HiRadixCache.load_back, "__wrapped__"), "patch not applied"
