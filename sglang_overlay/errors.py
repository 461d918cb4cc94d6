"""The overlay's exceptions, in one module that imports nothing of the overlay.

Patch implementations raise these without reaching into the orchestrator
(``sglang_overlay.core.hooking``), and the plugin entry point turns them into a
refused start-up. Cost: none (no imports beyond the standard library).

- ``OverlayError``: a patch cannot do its job (drift, a missing target, a hook
  that did not take, a configuration a patch cannot serve correctly).
- ``OverlayStartupError``: what leaves the plugin entry point. SGLang's
  ``load_plugins()`` catches every ``Exception`` a plugin raises and only logs it,
  so this is a ``SystemExit``: the process ends with the message instead of
  serving unpatched.
- ``RegistryError``: a patch declaration is malformed (a bug in the overlay, not
  upstream drift).

Invariants: this module imports nothing of the overlay.
"""

from __future__ import annotations


class OverlayError(RuntimeError):
    """A patch cannot do its job (drift, missing target, hook that did not take)."""


class OverlayStartupError(SystemExit):
    """Raised from the plugin entry point: SGLang's ``load_plugins`` catches only
    ``Exception``, so a ``SystemExit`` is what actually ends start-up."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class RegistryError(ValueError):
    """A patch declaration is malformed (a bug in the overlay, not upstream drift)."""
