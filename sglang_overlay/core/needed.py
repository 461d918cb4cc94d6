"""``sglang-overlay check --needed``: is each patch still needed on the installed upstream?

Each patch (or the release folder serving the installed sglang) declares a probe, ``"module:function"``
returning a ``Finding``: it runs upstream's own code, in this process, on the CPU, without the overlay (the
CLI never applies it; a probe calls upstream's unwrapped function), and says what upstream does wrong in one
line (needed), that the description's "When it can be dropped" has come (fixed upstream), or why it cannot
tell here. A probe that raises, or returns something else, is "cannot tell" with the reason, never a
traceback. When a new release comes, ``check --needed`` in its environment says which patches to re-read
first (fixed upstream: drop it) beside ``rebase-check`` (which targets changed).

Invariant: read-only; the probes touch no file and no server. Cost: each probe imports the upstream modules
it exercises (seconds, once) and runs a few calls on tiny CPU inputs.
"""

from __future__ import annotations

import time

from sglang_overlay.core import installed, settings
from sglang_overlay.core.declarations import CANNOT_TELL, FIXED_UPSTREAM, NEEDED, Finding, resolve
from sglang_overlay.core.registry import discover_patches

VERDICTS = (NEEDED, FIXED_UPSTREAM, CANNOT_TELL)


def run_probe(probe: str | None) -> tuple[Finding, float]:
    """The probe's finding and its wall seconds; a missing, failing or malformed probe is ``CANNOT_TELL``."""
    if not probe:
        return Finding(CANNOT_TELL, "the patch declares no probe of upstream's bug"), 0.0
    started = time.perf_counter()
    try:
        found = resolve(probe)()
    except Exception as exc:
        found = Finding(CANNOT_TELL, f"the probe {probe} failed: {type(exc).__name__}: {exc}".replace("\n", " "))
    if not isinstance(found, Finding):
        found = Finding(CANNOT_TELL, f"the probe {probe} returned {type(found).__name__}, not a Finding")
    return found, time.perf_counter() - started


def findings(upstream: str | None = None) -> list[dict]:
    """One row per patch of the installed release's series (and extras): id, verdict, evidence, seconds."""
    version = upstream or installed.installed_sglang_version()
    if version is None:
        raise LookupError("no sglang is installed here: the probes run upstream's own code")
    rows = []
    disabled = set(settings.disabled_patch_ids())
    for patch in discover_patches(version, extra=tuple(settings.extra_patch_modules())):
        found, seconds = run_probe(patch.probe)
        rows.append({"patch": patch.id, "enabled": patch.id not in disabled, "verdict": found.verdict,
                     "evidence": found.evidence, "probe": patch.probe, "seconds": round(seconds, 3)})  # fmt: skip
    return rows


def exit_code(rows: list[dict]) -> int:
    """0: every enabled patch is needed; 1: one is fixed upstream (drop it); 2: one cannot tell here."""
    verdicts = {r["verdict"] for r in rows if r["enabled"]}
    return 1 if FIXED_UPSTREAM in verdicts else 2 if CANNOT_TELL in verdicts else 0
