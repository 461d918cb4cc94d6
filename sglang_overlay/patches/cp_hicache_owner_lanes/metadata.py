"""Lane metadata under page-owner KV residency: pages per lane of a cyclic run, and a node's run.

Job: position-page ``P`` of a chain with rotation base ``b`` lives in lane ``(b + P) % N`` (a lane: the pages
one CP rank owns, ``planner``'s module docstring); a node is one run of such pages, described by its first
lane (phase), first position-page and page count. :func:`run_lane_pages` is what the release folders read;
:class:`CpHiCacheNodeMetadata` carries a run on a node (the planner's stand-in tree in the tests; on 0.5.23
upstream's ``rotation_base`` is the metadata), its field names the fork's (``owner`` for lane).
Invariant: pages per lane come from upstream's closed form (``PageInterleavePoolAllocator._class_counts``),
never from a tensor, so host-only nodes answer too. Cost: closed form once per run (memoized).
Imports neither torch nor sglang at module import.
"""

from __future__ import annotations

import functools
from typing import Dict, Optional, Tuple

ATTR = "cp_owner_meta"  # attribute name on upstream TreeNode objects


@functools.lru_cache(maxsize=4096)
def run_lane_pages(first_lane: int, num_pages: int, num_lanes: int) -> Tuple[int, ...]:
    """Pages per lane of a cyclic run of ``num_pages`` pages from ``first_lane`` over ``num_lanes`` lanes:
    upstream's closed form (``_class_counts``), as a tuple (memoized: a pure function)."""
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    return tuple(PageInterleavePoolAllocator._class_counts(first_lane, num_pages, num_lanes))


class CpHiCacheNodeMetadata:
    """Owner layout of one radix node's pages (host-side, never derived from tensors).

    ``owner_counts_by_size`` maps a CP size ``n`` to the node's per-owner page
    counts under ``n`` owners; it is filled lazily per size. Sizes other than the
    allocator's ``shard_size`` must divide it (owner ``l % n`` is then
    ``(l % N) % n``, so the counts fold); anything else is refused.
    """

    __slots__ = ("shard_size", "first_owner", "start_page", "num_pages", "owner_counts_by_size")

    def __init__(self, shard_size: int, first_owner: int, start_page: int, num_pages: int):
        if shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {shard_size}")
        if not 0 <= first_owner < shard_size:
            raise ValueError(f"first_owner {first_owner} out of range for shard_size {shard_size}")
        if start_page < 0 or num_pages < 0:
            raise ValueError(f"negative page span (start_page={start_page}, num_pages={num_pages})")
        self.shard_size = shard_size
        self.first_owner = first_owner
        self.start_page = start_page
        self.num_pages = num_pages
        self.owner_counts_by_size: Dict[int, Tuple[int, ...]] = {}

    # -- construction ------------------------------------------------------------

    @classmethod
    def for_chain(cls, shard_size: int, rotation_base: int, start_page: int, num_pages: int):
        """Node at position-page ``start_page`` of a chain with rotation base ``rotation_base``."""
        return cls(shard_size, (rotation_base + start_page) % shard_size, start_page, num_pages)

    def continuation(self, num_pages: int) -> "CpHiCacheNodeMetadata":
        """Metadata of a node that continues this one's chain right after its last page."""
        return CpHiCacheNodeMetadata(self.shard_size, self.next_owner, self.start_page + self.num_pages, num_pages)

    def split(self, left_pages: int) -> Tuple["CpHiCacheNodeMetadata", "CpHiCacheNodeMetadata"]:
        """Metadata of both halves of a split after ``left_pages`` pages (prefix, suffix)."""
        if not 0 < left_pages < self.num_pages:
            raise ValueError(f"split at page {left_pages} of a {self.num_pages}-page node")
        left = CpHiCacheNodeMetadata(self.shard_size, self.first_owner, self.start_page, left_pages)
        right = CpHiCacheNodeMetadata(
            self.shard_size,
            (self.first_owner + left_pages) % self.shard_size,
            self.start_page + left_pages,
            self.num_pages - left_pages,
        )
        return left, right

    # -- queries -----------------------------------------------------------------

    @property
    def rotation_base(self) -> int:
        """Rotation base of the chain this node belongs to."""
        return (self.first_owner - self.start_page) % self.shard_size

    @property
    def next_owner(self) -> int:
        """Owner class of the page right after this node."""
        return (self.first_owner + self.num_pages) % self.shard_size

    def owner_counts(self, n: Optional[int] = None) -> Tuple[int, ...]:
        """Pages of this node per owner class under ``n`` owners (default: the shard size)."""
        n = self.shard_size if n is None else n
        counts = self.owner_counts_by_size.get(n)
        if counts is not None:
            return counts
        if n == self.shard_size:
            counts = run_lane_pages(self.first_owner, self.num_pages, n)
        elif n >= 1 and self.shard_size % n == 0:
            full = self.owner_counts(self.shard_size)
            folded = [0] * n
            for owner, pages in enumerate(full):
                folded[owner % n] += pages
            counts = tuple(folded)
        else:
            raise ValueError(
                f"owner counts for CP size {n} are not defined on a node placed for "
                f"shard size {self.shard_size} (n must divide it)"
            )
        self.owner_counts_by_size[n] = counts
        return counts

    def __eq__(self, other) -> bool:
        if not isinstance(other, CpHiCacheNodeMetadata):
            return NotImplemented
        return (self.shard_size, self.first_owner, self.start_page, self.num_pages) == (
            other.shard_size,
            other.first_owner,
            other.start_page,
            other.num_pages,
        )

    __hash__ = None

    def __repr__(self) -> str:
        return (
            f"CpHiCacheNodeMetadata(N={self.shard_size}, first_owner={self.first_owner}, "
            f"start_page={self.start_page}, num_pages={self.num_pages})"
        )


def get(node) -> Optional[CpHiCacheNodeMetadata]:
    return getattr(node, ATTR, None)


def put(node, meta: Optional[CpHiCacheNodeMetadata]) -> None:
    setattr(node, ATTR, meta)
