"""The lock's dependencies are what the hooks use, found by ``core.dependencies`` (``sglang-overlay lock``).

Against the installed release's real upstream: the shipped lock holds exactly what :func:`dependencies.find`
finds for each patch (so a new call in a hook fails here, and in ``lock --check``, until the lock is
regenerated); the finder sees an attribute, a ``getattr`` string and an imported function; a name the patch hooks
is a target, not a dependency; a probe and another release's folder are not read.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from sglang_overlay.core import dependencies, installed, lockfile, verify
from sglang_overlay.core.registry import Patch, Release, Target, discover_patches, releases_of

VERSION = installed.installed_sglang_version() or "0"
PATCHES = discover_patches(VERSION)
RADIX = "sglang.srt.mem_cache.radix_cache"


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.id)
def test_the_lock_holds_what_the_hooks_use(patch):
    found = {d.path: d.needed_by for d in dependencies.find(patch, VERSION)}
    locked = {d.path: d.needed_by for d in verify.locked_dependencies(lockfile.read_lock(), patch.id)}
    assert found == locked, (
        f"patch {patch.id} on sglang {VERSION}: the hooks use {sorted(set(found) - set(locked))} beyond the lock, "
        f"and the lock holds {sorted(set(locked) - set(found))} no hook uses: regenerate it (sglang-overlay lock)"
    )


@pytest.fixture
def made_patch(tmp_path, monkeypatch):
    """A patch folder of a package on ``sys.path`` (``ovl_deps_pkg.my_fix``): a root hook, a release folder
    serving this release and one serving another, and a probe, each using an upstream name of RadixKey."""
    root = tmp_path / "ovl_deps_pkg" / "my_fix"
    (root / "current").mkdir(parents=True)
    (root / "older").mkdir()
    (tmp_path / "ovl_deps_pkg" / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "hooks.py").write_text(textwrap.dedent(f"""
        from {RADIX} import RadixKey  # a class: its names count, the import itself is no dependency

        def around(original, key, *args):
            return original(key, *args) if key.raw_token_ids is not None else key.page_aligned(1)
        """))  # fmt: skip
    (root / "current" / "__init__.py").write_text(
        f"from sglang_overlay.core.registry import Release, Target\n"
        f"RELEASE = Release('=={VERSION}', targets=(Target('{RADIX}', 'RadixKey.__len__', "
        f"'ovl_deps_pkg.my_fix.current.gate:hook'),))\n"
    )
    (root / "current" / "gate.py").write_text(
        "def hook(original, key):\n    return getattr(key, '_raw_len')() if hasattr(key, 'is_bigram') else 0\n"
    )
    (root / "older" / "__init__.py").write_text(
        "from sglang_overlay.core.registry import Release, Target\n"
        f"RELEASE = Release('<0.0.1', targets=(Target('{RADIX}', 'RadixKey.__len__', 'ovl_deps_pkg.my_fix.older.g:h'),))\n"
    )
    (root / "older" / "g.py").write_text("def h(original, key):\n    return key.extra_key_of_another_release\n")
    (root / "probe.py").write_text("def probe():\n    return RadixKey.cache_salt_only_a_probe_reads\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for name in [m for m in sys.modules if m.startswith("ovl_deps_pkg")]:
        del sys.modules[name]


def test_the_finder_sees_attributes_getattr_strings_and_not_what_is_hooked(made_patch):
    import importlib

    package = importlib.import_module("ovl_deps_pkg.my_fix")
    releases = releases_of(package)
    whole = Patch(id="my-fix", title="t", description="d", process="scheduler", releases=releases,
                  targets=(Target(RADIX, "RadixKey.page_aligned", "ovl_deps_pkg.my_fix.hooks:around"),),
                  extra=True, declared_in="ovl_deps_pkg.my_fix")  # fmt: skip
    patch = whole.for_upstream(VERSION)
    assert isinstance(releases[0], Release) and {r.folder for r in releases} == {"current", "older"}
    found = {d.qualname: d.needed_by for d in dependencies.find(patch, VERSION)}
    # key.raw_token_ids (a property) and getattr(key, "_raw_len"): their definitions; hasattr(key, "is_bigram"): a
    # name of the class with no definition of its own (a slot), so the whole class; page_aligned and __len__ are
    # hooked (targets); the older folder's and the probe's names are not read
    assert found == {"RadixKey.raw_token_ids": "hooks", "RadixKey._raw_len": "current.gate", "RadixKey": "current.gate"}
    root, files = dependencies.hook_files(patch, VERSION)
    assert root == made_patch and {f.relative_to(root).as_posix() for f in files} == {
        "__init__.py", "hooks.py", "current/__init__.py", "current/gate.py"}  # fmt: skip


def test_an_extra_patch_in_a_plain_module_is_read_from_that_module():
    """``lock --include-extra`` for ``tests/support/demo_patch.py``: its hook module alone, no folder walk."""
    from tests.support import demo_patch

    (patch,) = discover_patches(VERSION, extra=("tests.support.demo_patch",))[-1:]
    root, files = dependencies.hook_files(patch, VERSION)
    assert files == [__import__("pathlib").Path(demo_patch.__file__)]
    assert dependencies.find(patch, VERSION) == ()  # the demo hook calls only upstream's own (hooked) method
