"""Install a hook on a real upstream class the way SGLang's HookRegistry does, for one block.

``around(owner, attribute, hook, patch_id)``: ``hook(original, self, *args, **kwargs)`` with
``__wrapped__`` set, the original put back afterwards. Nothing is installed when ``patch_id`` is disabled
(``SGLANG_OVERLAY_DISABLE``): the failing-first runs of a patch's tests, upstream's own behaviour.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager


@contextmanager
def around(owner: type, attribute: str, hook, patch_id: str):
    from sglang_overlay.core import settings

    original = owner.__dict__[attribute]
    if patch_id in settings.disabled_patch_ids():
        yield
        return

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        return hook(original, self, *args, **kwargs)

    setattr(owner, attribute, wrapper)
    try:
        yield
    finally:
        setattr(owner, attribute, original)
