"""Upstream 0.5.23 names the release folder's modules share, imported on first use.

Job: ``ComponentType.FULL`` and ``PageInterleavePoolAllocator`` without importing upstream when a module
of this folder is imported. Invariant: the same objects upstream uses. Cost: one import each, then cached.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def full():
    """Upstream's ``ComponentType.FULL``, imported on first use: importing this module imports no upstream."""
    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    return ComponentType.FULL


@functools.lru_cache(maxsize=None)
def interleaved() -> type:
    """Upstream's ``PageInterleavePoolAllocator``, imported on first use."""
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    return PageInterleavePoolAllocator
