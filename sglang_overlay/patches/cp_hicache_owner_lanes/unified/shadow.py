"""One call's instance-method shadowing, the one trick the 0.5.23 gates use to answer upstream's own gate.

Job: for the duration of a ``with`` block, an upstream object's method reads as a function of ours: an instance
attribute of the same name shadows the class's method (Python looks up the instance ``__dict__`` first), so
upstream's code, unchanged, calls ours for that one call on that one object::

    with shadowed(cache, evict_for_alloc=gate.evict_for_alloc):
        loaded = original(cache, **kwargs)  # upstream's body calls gate.evict_for_alloc

Invariant: on exit, even when the block raises, each name is as it was: removed, or an instance attribute that
was there before is put back. Nothing else on the object, its class or another instance is touched.
Cost: two dict operations per name on entry and on exit.
"""

from __future__ import annotations

from contextlib import contextmanager

_MISSING = object()


@contextmanager
def shadowed(obj, **methods):
    """Shadow ``obj``'s attributes named by ``methods`` with the given callables for the block.

    Args:
        obj: an object with an instance ``__dict__`` (upstream's cache or host pool group).
        methods: attribute name -> the callable it reads as inside the block.
    """
    d = obj.__dict__
    saved = {name: d.get(name, _MISSING) for name in methods}
    d.update(methods)
    try:
        yield obj
    finally:
        for name, was in saved.items():
            if was is _MISSING:
                d.pop(name, None)
            else:
                d[name] = was
