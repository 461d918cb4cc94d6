"""``unified/shadow.py``: one call's instance-method shadowing, put back as it was even when the block raises.

Pure Python (no upstream): the gate's and the host-backup hook's own tests show it on upstream's objects.
"""

from __future__ import annotations

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes.unified.shadow import shadowed


class Pool:
    def available_size(self):
        return 1

    def alloc(self):
        return "class"


def test_the_block_reads_the_shadow_and_the_class_method_returns_after():
    pool, other = Pool(), Pool()
    with shadowed(pool, available_size=lambda: 7, alloc=lambda: "ours") as same:
        assert same is pool and (pool.available_size(), pool.alloc()) == (7, "ours")
        assert other.available_size() == 1  # one instance only
    assert (pool.available_size(), pool.alloc()) == (1, "class") and pool.__dict__ == {}


def test_an_earlier_instance_attribute_is_put_back_even_when_the_block_raises():
    pool = Pool()
    earlier = lambda: 3  # noqa: E731
    pool.available_size = earlier
    with pytest.raises(RuntimeError, match="boom"):
        with shadowed(pool, available_size=lambda: 7, alloc=lambda: "ours"):
            raise RuntimeError("boom")
    assert pool.__dict__ == {"available_size": earlier} and pool.alloc() == "class"
