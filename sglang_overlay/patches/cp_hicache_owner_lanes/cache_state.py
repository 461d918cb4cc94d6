"""The per-cache state slot of the patch: one attribute name, one lookup, for every release.

Job: keep each release's state object on its cache under ``STATE_ATTR`` and build it once.
Invariant: a cache holds its state, ``INERT`` (the patch does not act on it) or nothing yet;
``state_of`` answers None for the latter two. Cost: one dict lookup after the first call.
"""

from __future__ import annotations

from typing import Callable

STATE_ATTR = "_cp_owner_lanes"  # one name on every release: counters_of reads it
INERT = False  # stored "the patch does not act on this cache" (distinct from "not decided yet")


def state_of(cache, build: Callable):
    """The cache's state; ``build(cache)`` makes it on first use and returns the state, ``INERT``
    (stored: never asked again) or None (not decidable yet: nothing stored, asked again next time)."""
    state = cache.__dict__.get(STATE_ATTR)
    if state is not None:
        return state or None
    state = build(cache)
    if state is None:
        return None
    cache.__dict__[STATE_ATTR] = state
    return state or None
