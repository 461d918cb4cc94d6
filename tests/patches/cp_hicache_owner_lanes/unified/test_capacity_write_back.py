"""cp-hicache-owner-lanes on sglang 0.5.23: on write-back, the capacity hook's victims take the steps
upstream's own eviction takes (``_evict_components``: backup with ``write_back=True``, a blocking
``writing_check``, then demote; under host memory pressure the subtree dropped with upstream's warning), on the
real ``UnifiedRadixCache``, its HiCache controller and ``PageInterleaveHostPool`` (CPU; stand-ins named in this
folder's hicache_cpu_standins.py).

Invariant: the steps are recorded by instance attributes over the real methods, the same way on upstream's run
and the hook's; the evicted tokens reach upstream's eviction metrics. With
``SGLANG_OVERLAY_DISABLE=cp-hicache-owner-lanes`` the hook is not installed and every case fails
(failing-first evidence). Cost: a few seconds (two harnesses per case).
"""

from __future__ import annotations

import re

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes.report import logger
from tests.patches.cp_hicache_owner_lanes.unified.capacity_runs import lane0_newest


@pytest.fixture(scope="module", autouse=True)
def hook(capacity_hook):
    """The capacity hook (conftest.py's ``capacity_hook``) for every test here."""


def protocol(h, log):
    """Record the write-back steps upstream's ``_evict_components`` takes per victim, with their
    ``write_back`` argument and result, on this cache (instance attributes over the real methods)."""
    for name in ("_execute_and_commit_kv_backup", "writing_check", "_demote", "_drop_subtree_no_host"):
        real = getattr(h.cache, name)

        def step(*args, _real=real, _name=name, **kwargs):
            result = _real(*args, **kwargs)
            log.append((_name, kwargs.get("write_back"), result))
            return result

        setattr(h.cache, name, step)


def hold_every_host_page(h):
    """Host memory pressure: every host page held outside the tree (nothing on host to evict)."""
    slots = h.cc.mem_pool_host.anchor_entry.host_pool._slots
    for lane, pages in enumerate(slots.class_free_page_counts()):
        for _ in range(pages):
            assert slots.alloc_cyclic(start_class=lane, need_size=h.ps) is not None
    assert slots.class_free_page_counts() == [0] * h.n


@pytest.mark.parametrize("ps", [4, 1])
@pytest.mark.parametrize("host_full", [False, True])
def test_write_back_victims_take_upstreams_deferred_demote_steps(host_full, ps, caplog):
    """One victim, on write-back: the planned eviction takes the steps upstream's own eviction takes for
    one victim, with the same arguments and results (backup with write_back=True, a blocking
    writing_check, then demote; under host pressure the backup writes nothing and the subtree is
    dropped, with upstream's warning), and reports the tokens to upstream's eviction metrics."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    steps = []
    for through_hook in (False, True):
        h = lane0_newest("write_back", ps=ps)
        if host_full:
            hold_every_host_page(h)
        log = []
        protocol(h, log)
        with caplog.at_level("WARNING"), caplog.at_level("WARNING", logger=logger.name):
            if through_hook:
                h.alloc.evict_to_free_tokens(h.cache, 4 * ps)
            else:
                h.cache.evict(EvictParams(num_tokens=ps))  # upstream: its LRU leaf (lane 1)
        steps.append(log)
        assert h.evicted_tokens == ps and (h.alloc.available_size() >= 4 * ps) == through_hook
    assert steps[0] == steps[1]
    if host_full:
        victim = [("_execute_and_commit_kv_backup", True, 0), ("_drop_subtree_no_host", None, True)]
    else:
        victim = [("_execute_and_commit_kv_backup", True, ps), ("writing_check", True, None), ("_demote", None, None)]
    assert steps[1] == victim + [("writing_check", True, None)]
    dropped = [r.getMessage() for r in caplog.records if "dropped without backup" in r.getMessage()]
    assert len(dropped) == (2 if host_full else 0)
    if host_full:
        (mine,) = [m for m in dropped if m.endswith("(owner-lane eviction)")]
        assert re.fullmatch(
            r"write_back: KV subtree dropped without backup due to host memory pressure, root node \d+ "
            r"\(owner-lane eviction\)",
            mine,
        )
