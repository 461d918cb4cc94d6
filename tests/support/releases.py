"""Which release folder of a patch serves the installed sglang: how a test outside a release folder asks
which upstream it runs on, from the registry's declarations (``Patch.release_for``), never a version compare.

A test inside ``tests/patches/<patch>/<folder>/`` needs none of this (it is collected only where its folder's
range holds). A test that runs on every pin and expects something per release keys that by folder name
(``{"unified": ...}``, one key per folder), so a new release folder fails it loudly (``KeyError``) until it
says what it expects there.

Invariant: the folder ranges are the ones the overlay itself serves by; no version literal here.
Cost: one ``discover_patches`` (the patches' declarations; upstream is not imported), cached.
"""

from __future__ import annotations

import functools
import importlib.metadata

import pytest


@functools.cache
def _declared() -> dict:
    from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches

    return {patch.id: patch for patch in discover_patches(ANY_UPSTREAM)}


def installed_sglang() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def serving_folder(patch_id: str) -> str | None:
    """The release folder of ``patch_id`` that serves the installed sglang (None: none does, or no sglang)."""
    installed = installed_sglang()
    release = _declared()[patch_id].release_for(installed) if installed else None
    return release.folder if release else None


def per_release(patch_id: str, expected: dict):
    """``expected[folder]`` for the folder of ``patch_id`` serving the installed sglang; a folder the test does
    not name fails with what to add."""
    folder = serving_folder(patch_id)
    if folder not in expected:
        raise KeyError(f"{patch_id}: the installed sglang is served by folder {folder!r}; this test expects only "
                       f"{sorted(expected)}: say what it expects there")  # fmt: skip
    return expected[folder]


def hooked_targets(patch_id: str) -> list[str]:
    """``module.qualname`` of every target of ``patch_id`` on the installed sglang (its own and its folder's)."""
    from sglang_overlay.core.registry import discover_patches

    (patch,) = [p for p in discover_patches(installed_sglang()) if p.id == patch_id]
    return [f"{t.module}.{t.qualname}" for t in patch.targets]


def only_where_served_by(patch_id: str, folder: str, reason: str) -> pytest.MarkDecorator:
    """Skip unless ``folder`` of ``patch_id`` serves the installed sglang (for a module outside the folder)."""
    return pytest.mark.skipif(serving_folder(patch_id) != folder, reason=f"{reason} (only where {patch_id}'s "
                              f"{folder}/ serves the installed sglang)")  # fmt: skip
