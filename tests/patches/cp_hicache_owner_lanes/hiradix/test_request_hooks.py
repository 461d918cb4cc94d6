"""0.5.20's AROUND hooks on ``RadixCache.cache_finished_req`` / ``cache_unfinished_req``: they hand upstream
every argument unchanged and, on a page-interleaved cache only, scope the request's ``kv_rotation_base``
for the inserts upstream makes inside the call (the rotation base ``insert`` stamps on new nodes).

``original`` is a recording stand-in for upstream's method (the hooks' contract is the call they make);
the cache is a bare object: with the patch's state attribute set it counts as page-interleaved
(``state_of`` returns it), without it as any other cache. The real caches are in test_rotation.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sglang_overlay.patches.cp_hicache_owner_lanes.cache_state import STATE_ATTR
from sglang_overlay.patches.cp_hicache_owner_lanes.hiradix import stamping as hooks

HOOKS = [hooks.cache_finished_req_hook, hooks.cache_unfinished_req_hook]


def recording_original(seen: list):
    def original(self, req, *args, **kwargs):
        seen.append((self, req, args, kwargs, hooks._REQ_ROTATION_BASE.get()))
        return "upstream's result"

    return original


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.__name__)
@pytest.mark.parametrize("interleaved", [False, True], ids=["other-cache", "page-interleaved"])
def test_every_argument_reaches_upstream_and_the_base_is_scoped_to_the_call(hook, interleaved):
    cache = SimpleNamespace()
    if interleaved:
        setattr(cache, STATE_ATTR, SimpleNamespace(shard_size=4))
    seen: list = []
    req = SimpleNamespace(kv_rotation_base=7)
    assert hook(recording_original(seen), cache, req, 1, 2, chunked=True) == "upstream's result"
    assert seen == [(cache, req, (1, 2), {"chunked": True}, 7 if interleaved else None)]
    assert hooks._REQ_ROTATION_BASE.get() is None  # reset after the call

    seen.clear()
    hook(recording_original(seen), cache, SimpleNamespace())  # a request that carries no rotation base
    assert seen == [(cache, seen[0][1], (), {}, None)]


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.__name__)
def test_the_base_is_reset_when_upstream_raises(hook):
    cache = SimpleNamespace(**{STATE_ATTR: SimpleNamespace(shard_size=4)})

    def failing(self, req, *args, **kwargs):
        assert hooks._REQ_ROTATION_BASE.get() == 3
        raise RuntimeError("upstream failed")

    with pytest.raises(RuntimeError, match="upstream failed"):
        hook(failing, cache, SimpleNamespace(kv_rotation_base=3))
    assert hooks._REQ_ROTATION_BASE.get() is None
