"""Environment variables that steer the overlay core, and the readers patches use for their own.

Every variable is read when it is needed (never cached at import), so tests and
launchers can set them per process. A patch's own knobs live in its folder
(``patches/<id>/settings.py``), are declared as ``Knob``s on its ``Patch``, and
are read with :func:`flag` / :func:`number` from here. A malformed value is a
``ValueError`` naming the variable (start-up refuses; nothing is guessed).

Invariants: no variable is read at import; a malformed value is an error, never a default.
Cost: one environment lookup per read.
"""

from __future__ import annotations

import os

STRICT = "SGLANG_OVERLAY_STRICT"
DISABLE = "SGLANG_OVERLAY_DISABLE"
ALLOW_UNPINNED = "SGLANG_OVERLAY_ALLOW_UNPINNED"
LOCK = "SGLANG_OVERLAY_LOCK"
EXTRA_PATCHES = "SGLANG_OVERLAY_EXTRA_PATCHES"
SGLANG_PLUGINS = "SGLANG_PLUGINS"
PROCESS_START = "SGLANG_OVERLAY_PROCESS_START"  # set by an overlay process: its children apply the overlay
STATUS_DIR = "SGLANG_OVERLAY_STATUS_DIR"  # where each process keeps its status record

PLUGIN_NAME = "sglang_overlay"
PLUGIN_MODULE = "sglang_overlay.plugin"  # its entry point: PLUGIN_MODULE:load
PLUGIN_GROUP = "sglang.srt.plugins"

_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}


def flag(name: str, default: bool, environ=None) -> bool:
    """A boolean variable: 1/0, true/false, yes/no, on/off; unset or blank is ``default``."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or raw.strip() == "":
        return default
    return parse_flag(name, raw)


def parse_flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


def _csv(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def strict() -> bool:
    """Default strict: any drift, missing target or hook that did not take ends start-up."""
    return flag(STRICT, True)


def disabled_patch_ids() -> list[str]:
    return _csv(DISABLE)


def allow_unpinned() -> bool:
    """Opt-out of the sglang version pin (per-target fingerprints are still enforced)."""
    return flag(ALLOW_UNPINNED, False)


def lock_override() -> str | None:
    return os.environ.get(LOCK) or None


def extra_patch_modules() -> list[str]:
    """Extra patch declaration modules (tests, experiments) beside sglang_overlay.patches."""
    return _csv(EXTRA_PATCHES)


def process_start_marked() -> bool:
    """An overlay process marked this one's start (it is a descendant: the ``.pth`` hook applies here)."""
    return bool(os.environ.get(PROCESS_START))


def sglang_plugins_raw() -> str:
    return os.environ.get(SGLANG_PLUGINS, "")


def sglang_plugins_whitelist() -> list[str] | None:
    """SGLANG_PLUGINS as SGLang reads it: None when unset or empty (every plugin loads)."""
    raw = sglang_plugins_raw()
    if not raw:
        return None
    return [x.strip() for x in raw.split(",") if x.strip()]


def number(name: str, default: float, *, minimum: float | None = None, environ=None) -> float:
    """A numeric variable; unset or blank is ``default``; below ``minimum`` is an error."""
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a number") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}={raw!r}: must be >= {minimum:g}")
    return value
