"""Owner metadata arithmetic: closed forms, folds, splits, continuations, and what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_overlay.patches.cp_hicache_owner_lanes import metadata as md


@settings(max_examples=300, deadline=None)
@given(
    n=st.sampled_from([1, 2, 3, 4, 8]),
    first=st.integers(0, 7),
    start=st.integers(0, 50),
    pages=st.integers(1, 40),
    data=st.data(),
)
def test_metadata_closed_form_and_split(n, first, start, pages, data):
    first %= n
    meta = md.CpHiCacheNodeMetadata(n, first, start, pages)
    explicit = [0] * n
    for p in range(pages):
        explicit[(first + p) % n] += 1
    assert meta.owner_counts() == tuple(explicit)
    assert meta.rotation_base == (first - start) % n
    base = meta.rotation_base
    assert md.CpHiCacheNodeMetadata.for_chain(n, base, start, pages) == meta  # a node at position-page start
    for d in [d for d in range(1, n + 1) if n % d == 0]:
        folded = [0] * d
        for p in range(pages):
            folded[((first + p) % n) % d] += 1
        assert meta.owner_counts(d) == tuple(folded)
        assert d in meta.owner_counts_by_size
    if pages > 1:
        cut = data.draw(st.integers(1, pages - 1))
        left, right = meta.split(cut)
        assert left.rotation_base == right.rotation_base == meta.rotation_base
        assert tuple(a + b for a, b in zip(left.owner_counts(), right.owner_counts())) == meta.owner_counts()
        assert left.continuation(right.num_pages) == right


def test_metadata_rejects_bad_input():
    """Each refusal names what is wrong; the bounds themselves are accepted."""
    with pytest.raises(ValueError, match=r"^shard_size must be >= 1, got 0$"):
        md.CpHiCacheNodeMetadata(0, 0, 0, 1)
    with pytest.raises(ValueError, match=r"^first_owner 4 out of range for shard_size 4$"):
        md.CpHiCacheNodeMetadata(4, 4, 0, 1)
    with pytest.raises(ValueError, match=r"^negative page span \(start_page=-1, num_pages=1\)$"):
        md.CpHiCacheNodeMetadata(4, 0, -1, 1)
    with pytest.raises(ValueError, match=r"^negative page span \(start_page=0, num_pages=-1\)$"):
        md.CpHiCacheNodeMetadata(4, 0, 0, -1)
    empty = md.CpHiCacheNodeMetadata(1, 0, 0, 0)  # a node of no whole page: owns nothing
    assert empty.owner_counts() == (0,) and empty.next_owner == 0
    with pytest.raises(
        ValueError,
        match=r"^owner counts for CP size 3 are not defined on a node placed for "
        r"shard size 4 \(n must divide it\)$",
    ):
        md.CpHiCacheNodeMetadata(4, 0, 0, 3).owner_counts(3)
    for at in (0, 3):
        with pytest.raises(ValueError, match=rf"^split at page {at} of a 3-page node$"):
            md.CpHiCacheNodeMetadata(4, 0, 0, 3).split(at)
