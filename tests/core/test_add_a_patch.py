"""The documented steps of adding or dropping a patch (docs/maintainers/patches.md) are all it takes: walked on a throw-away patch in a
temporary copy of this checkout (its tracked files as they are in the working tree; tier ci_slow).

The maintainer writes two things, the patch's folder and its description (and its tests); the documented
commands regenerate the lock and the generated tables; no existing patch file is touched; the
registry-derived tests cover the new patch without an edit; dropping it restores the tree exactly."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.support.checkout import changed, copy_checkout, git
from tests.support.env import REPO, subprocess_env

pytestmark = pytest.mark.ci_slow  # a copy of the checkout, fresh interpreters and a nested pytest

DECLARATION = '''\
"""Patch demo-added: a throw-away patch that proves the "add a patch" steps (test only)."""

from sglang_overlay.core.registry import Knob, Patch, Target

PATCH = Patch(
    id="demo-added",
    position={position},
    title="Throw-away: count RadixKey.page_aligned calls",
    description="demo-added.md",
    process="scheduler",
    targets=(Target("sglang.srt.mem_cache.radix_cache", "RadixKey.page_aligned",
                    "sglang_overlay.patches.demo_added.hooks:count", "AROUND"),),
    knobs=(Knob("SGLANG_OVERLAY_DEMO_ADDED_LIMIT", "3", "a throw-away knob", kind="number", minimum=0),),
)
'''
HOOKS = '''\
"""demo-added's hook: counts calls, returns upstream's result."""

CALLS = [0]


def count(original, *args, **kwargs):
    CALLS[0] += 1
    return original(*args, **kwargs)
'''
PATCH_TEST = '''\
"""demo-added: its hook counts RadixKey.page_aligned calls and returns upstream's result."""

import sglang_overlay
from sglang_overlay.patches.demo_added import hooks


def test_the_hook_counts_and_keeps_upstreams_result():
    sglang_overlay.apply()
    from sglang.srt.mem_cache.radix_cache import RadixKey

    before = hooks.CALLS[0]
    assert RadixKey([1, 2, 3, 4, 5]).page_aligned(2).token_ids == [1, 2, 3, 4]
    assert hooks.CALLS[0] == before + 1
'''
DESCRIPTION = """\
# demo-added: a throw-away patch

## Why

It proves the documented steps.

## How

An AROUND hook on RadixKey.page_aligned that counts calls.

## When it can be dropped

At the end of the test.

Constraint: none.
Rejected: none | test only.
Directive: none.
Confidence: high
Scope-risk: narrow
Tested: tests/core/test_add_a_patch.py
Not-tested: nothing else.
"""


def _pin_folder() -> str:
    from sglang_overlay.core import lockfile

    return lockfile.default_lock_path().parent.relative_to(REPO).as_posix()


PIN_FOLDER = _pin_folder()


def overlay(root, *args) -> subprocess.CompletedProcess:
    env = subprocess_env()
    env["PYTHONPATH"] = str(root)  # this copy's sglang_overlay and patches/, not the installed checkout
    return subprocess.run(
        [sys.executable, "-m", "sglang_overlay", *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )


REGENERATE = (("lock",), ("readme",))  # the documented regeneration: the lock, then the generated tables


def regenerate(root) -> None:
    for step in REGENERATE:
        if step == ("readme",):
            env = {**subprocess_env(), "PYTHONPATH": str(root)}
            proc = subprocess.run(
                [sys.executable, "scripts/readme_tables.py", "--write"],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        else:
            proc = overlay(root, *step)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """This checkout's tracked files (working-tree content) in a fresh git repository."""
    return copy_checkout(tmp_path_factory.mktemp("clone") / "sglang-overlay")


def test_adding_a_patch_takes_its_folder_and_its_description(copy):
    from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches

    position = max(p.position for p in discover_patches(ANY_UPSTREAM)) + 1
    folder = copy / "sglang_overlay" / "patches" / "demo_added"
    folder.mkdir()
    (folder / "__init__.py").write_text(DECLARATION.format(position=position))
    (folder / "hooks.py").write_text(HOOKS)
    (copy / "patches" / "demo-added.md").write_text(DESCRIPTION)
    tests = copy / "tests" / "patches" / "demo_added"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "test_demo_added.py").write_text(PATCH_TEST)
    written_by_hand = changed(copy)
    assert written_by_hand == {
        "sglang_overlay/patches/demo_added/__init__.py",
        "sglang_overlay/patches/demo_added/hooks.py",
        "patches/demo-added.md",
        "tests/patches/demo_added/__init__.py",
        "tests/patches/demo_added/test_demo_added.py",
    }

    regenerate(copy)
    regenerated = changed(copy) - written_by_hand
    tables = {"README.md", "docs/patches/index.md", "docs/operators/environment.md", "docs/maintainers/patches.md"}
    assert regenerated == {f"{PIN_FOLDER}/upstream.lock", *tables}, regenerated
    assert "`demo-added`" in (copy / "README.md").read_text()
    assert "`SGLANG_OVERLAY_DEMO_ADDED_LIMIT`" in (copy / "docs" / "operators" / "environment.md").read_text()

    check = overlay(copy, "check", "--json")
    rows = [r for r in json.loads(check.stdout)["targets"] if r["patch"] == "demo-added"]
    assert check.returncode == 0 and [r["fingerprint"] for r in rows] == ["match"], check.stdout[-2000:]

    # the registry-derived tests cover it with no edit: declaration, description, lock, README
    env = subprocess_env()
    env["PYTHONPATH"] = str(copy)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "tests/core/test_overlay_registry.py",
            "tests/core/test_readme.py",
            "tests/patches/demo_added",
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    for test in (
        "test_description_has_sections_and_trailers",
        "test_every_target_of_the_installed_release_is_locked_and_its_hook_resolves",
        "test_each_patch_and_each_release_folder_has_its_tests_folder",
    ):
        assert f"{test}[demo-added] PASSED" in proc.stdout, proc.stdout[-3000:]
    assert "test_every_generated_block_is_current PASSED" in proc.stdout


def test_dropping_it_restores_the_tree(copy):
    shutil.rmtree(copy / "sglang_overlay" / "patches" / "demo_added")
    shutil.rmtree(copy / "tests" / "patches" / "demo_added")
    (copy / "patches" / "demo-added.md").unlink()
    regenerate(copy)
    assert changed(copy) == set(), git(copy, "status", "--porcelain")


def test_a_second_patch_at_a_taken_position_is_refused(tmp_path):
    code = textwrap.dedent("""
        import sys
        from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches
        discover_patches(ANY_UPSTREAM)
    """)
    root = tmp_path / "tree"
    shutil.copytree(REPO / "sglang_overlay", root / "sglang_overlay", ignore=shutil.ignore_patterns("__pycache__"))
    clash = root / "sglang_overlay" / "patches" / "demo_clash"
    clash.mkdir()
    (clash / "__init__.py").write_text(
        DECLARATION.replace("demo-added", "demo-clash").replace("demo_added", "demo_clash").format(position=1)
    )
    env = subprocess_env()
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "two patches share a series position" in proc.stderr
