"""The registry, in-process: the shipped patches as declared, and the rules every declaration obeys.

Release folders: a patch's code for one upstream design lives in a sub-package declaring
``RELEASE = Release(range, targets)``; the range is declared once and selects the hooks (here) and the tests
(tests/conftest.py). Adding a release is one folder (and one lock), shown on a package built in tmp_path.
"""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

from sglang_overlay.core import installed, lockfile
from sglang_overlay.core.registry import (
    ANY_UPSTREAM,
    Knob,
    Patch,
    RegistryError,
    Release,
    Target,
    discover_patches,
    package_name,
)
from tests.support.env import REPO

SHIPPED = discover_patches(ANY_UPSTREAM)
TRAILERS = ("Constraint", "Rejected", "Directive", "Confidence", "Scope-risk", "Tested", "Not-tested")


def test_every_patch_folder_is_declared_in_position_order():
    folders = {p.parent.name for p in (REPO / "sglang_overlay" / "patches").glob("*/__init__.py")}
    assert {package_name(p.id) for p in SHIPPED} == folders
    assert [p.position for p in SHIPPED] == sorted({p.position for p in SHIPPED})


@pytest.mark.parametrize("patch", SHIPPED, ids=lambda p: p.id)
def test_each_patch_and_each_release_folder_has_its_tests_folder(patch):
    tests = REPO / "tests" / "patches" / package_name(patch.id)
    assert list(tests.glob("test_*.py")), f"{patch.id}: no version-free tests in {tests}"
    for release in patch.releases:
        assert list((tests / release.folder).glob("test_*.py")), f"{patch.id}: no tests for {release.folder}/"


@pytest.mark.parametrize("patch", SHIPPED, ids=lambda p: p.id)
def test_each_release_folder_says_the_range_it_serves_first(patch):
    """A reader opening a release folder sees the range first: its docstring's first line names the declared
    range and the supported pins in it, and the folder."""
    import importlib

    for release in patch.releases:
        doc = importlib.import_module(f"{patch.package}.{release.folder}").__doc__ or ""
        pins = ", ".join(v for v in lockfile.pin_dirs() if release.applies_to(v))
        first = (
            f"Serves sglang {release.upstream} (the pin {pins}): release folder ``{release.folder}/`` of {patch.id}."
        )
        assert doc.splitlines()[0] == first, (doc.splitlines()[:1], first)


@pytest.mark.parametrize("patch", SHIPPED, ids=lambda p: p.id)
def test_description_has_sections_and_trailers(patch):
    text = (REPO / "patches" / patch.description).read_text()
    for section in ("## Why", "## How", "## When it can be dropped"):
        assert section in text, f"{patch.description} lacks {section}"
    for trailer in TRAILERS:
        assert re.search(rf"^{trailer}: \S", text, re.M), f"{patch.description} lacks a {trailer}: trailer"
    dropped = text.split("## When it can be dropped", 1)[1].split("\n## ", 1)[0]
    assert dropped.strip(), f"{patch.description}: 'When it can be dropped' is empty"  # the one place it is said


@pytest.mark.parametrize("patch", discover_patches(installed.installed_sglang_version() or "0"), ids=lambda p: p.id)
def test_every_target_of_the_installed_release_is_locked_and_its_hook_resolves(patch):
    lock = lockfile.read_lock()
    for target in patch.targets:
        entry = lock["targets"][target.path]
        assert entry["patch"] == patch.id and entry["hook_type"] == target.hook_type
        assert callable(target.resolve_hook())


def test_declarations_are_validated():
    with pytest.raises(RegistryError, match="lower-case"):
        Patch(id="Bad_Id", title="t", description="d", process="any", targets=(Target("m", "f", "a:b"),))
    with pytest.raises(RegistryError, match="process .gpu. not in"):
        Patch(id="ok", title="t", description="d", process="gpu", targets=(Target("m", "f", "a:b"),))
    with pytest.raises(RegistryError, match="hook_type"):
        Target("m", "f", "a:b", hook_type="INSTEAD")
    with pytest.raises(RegistryError, match="module:function"):
        Target("m", "f", "a.b")
    with pytest.raises(RegistryError, match="position"):
        Patch(id="ok", title="t", description="d", process="any", targets=(Target("m", "f", "a:b"),), position=-1)
    with pytest.raises(RegistryError, match="version specifier"):
        Release("0.5.23 or later", targets=(Target("m", "f", "a:b"),))
    with pytest.raises(RegistryError, match="declares no upstream range"):
        Release("", targets=(Target("m", "f", "a:b"),))
    with pytest.raises(RegistryError, match="declares no targets"):
        Release(">=1", targets=())
    with pytest.raises(RegistryError, match="SGLANG_OVERLAY_"):
        Knob("MY_VAR", "1", "m")
    with pytest.raises(ValueError, match="expected one of"):
        Knob("SGLANG_OVERLAY_X", "maybe", "m")


@pytest.mark.parametrize("a, b, witness", [("<0.5.23", "<0.5.24", "0"), (">=0.5.22,<0.6", ">=0.5.23", "0.5.23"),
                                           ("==0.5.23", "~=0.5.22", "0.5.23"), (">0.5.23", ">=0.5.23.post1", "0.5.23.9999")])  # fmt: skip
def test_overlapping_release_ranges_are_refused_naming_both_folders(a, b, witness):
    first = Release(a, targets=(Target("m", "A.f", "p.one.h:f"),), folder="one")
    second = Release(b, targets=(Target("m", "A.f", "p.two.h:f"),), folder="two")
    with pytest.raises(RegistryError) as exc:
        Patch(id="ok", title="t", description="d", process="any", position=1, releases=(first, second))
    message = str(exc.value)
    assert f"'one' ({a})" in message and f"'two' ({b})" in message and f"claim sglang {witness}" in message


def test_adjacent_ranges_serve_each_release_once():
    old = Release("<0.5.23", targets=(Target("m", "A.f", "p.old.h:f"),), folder="old")
    new = Release(">=0.5.23", targets=(Target("m", "A.f", "p.new.h:f"),), folder="new")
    patch = Patch(id="ok", title="t", description="d", process="any", position=1, releases=(old, new))
    assert [t.hook for t in patch.for_upstream("0.5.22.post3").targets] == ["p.old.h:f"]
    assert [t.hook for t in patch.for_upstream("0.5.23").targets] == ["p.new.h:f"]
    # PEP 440: a pre-release of the boundary is in neither range. The code is chosen by the lock's version (a
    # released pin), never the installed one, so such a release only runs a pin's code under ALLOW_UNPINNED.
    assert patch.for_upstream("0.5.23rc1") is None


def _write_package(root, name: str, folders: dict[str, str], extra_patch: str = "") -> None:
    """A patches package ``name`` with one patch ``demo`` whose release folders are ``folders`` (folder -> range)."""
    pkg = root / name
    (pkg / "demo").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "demo" / "__init__.py").write_text(
        textwrap.dedent("""
        from sglang_overlay.core.registry import Patch
        PATCH = Patch(id="demo", title="t", description="demo.md", process="scheduler", position=1)
    """)
    )
    for folder, spec in folders.items():
        (pkg / "demo" / folder).mkdir()
        (pkg / "demo" / folder / "hooks.py").write_text(
            "def around(original, *a, **k):\n    return original(*a, **k)\n"
        )
        (pkg / "demo" / folder / "__init__.py").write_text(
            textwrap.dedent(f"""
            from sglang_overlay.core.registry import Release, Target
            RELEASE = Release({spec!r}, targets=(Target("sglang.srt.x", "A.f", f"{{__name__}}.hooks:around"),))
        """)
        )
    if extra_patch:
        (pkg / "other").mkdir()
        (pkg / "other" / "__init__.py").write_text(textwrap.dedent(extra_patch))


@pytest.fixture
def package(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def make(folders, extra_patch=""):
        name = f"patches_{len(made)}_{abs(hash(str(tmp_path))) % 10**6}"
        _write_package(tmp_path, name, folders, extra_patch)
        made.append(name)
        return name

    yield make
    for name in made:
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[mod]


def test_adding_a_release_is_one_folder(package):
    """Two designs, then a third: one more folder, and each release gets exactly its folder's hooks."""
    two = package({"legacy": "<0.5.23", "unified": ">=0.5.23"})
    three = package({"legacy": "<0.5.23", "unified": ">=0.5.23,<0.6", "paged": ">=0.6"})

    def hooks(pkg, version):
        return [t.hook.split(".")[-2] for p in discover_patches(version, package=pkg) for t in p.targets]

    assert hooks(two, "0.5.22") == ["legacy"] and hooks(two, "0.6.1") == ["unified"]
    assert hooks(three, "0.5.22") == ["legacy"] and hooks(three, "0.5.23") == ["unified"]
    assert hooks(three, "0.6.1") == ["paged"]
    whole = discover_patches(ANY_UPSTREAM, package=three)[0]
    assert [r.folder for r in whole.releases] == ["legacy", "paged", "unified"]


def test_a_release_outside_every_folder_has_no_series_entry(package):
    pkg = package({"unified": ">=0.5.23"})
    assert discover_patches("0.5.22", package=pkg) == []


def test_overlapping_folders_are_refused_at_discovery(package):
    pkg = package({"legacy": "<0.5.24", "unified": ">=0.5.23"})
    with pytest.raises(
        RegistryError, match=r"'legacy' \(<0.5.24\) and 'unified' \(>=0.5.23\) both claim sglang 0.5.23"
    ):
        discover_patches(ANY_UPSTREAM, package=pkg)


def test_a_release_folders_hook_must_live_in_the_folder(package, tmp_path):
    pkg = package({"unified": ">=0.5.23"})
    init = tmp_path / pkg / "demo" / "unified" / "__init__.py"
    init.write_text(init.read_text().replace('f"{__name__}.hooks:around"', '"elsewhere.hooks:around"'))
    with pytest.raises(RegistryError, match="lives outside the folder"):
        discover_patches(ANY_UPSTREAM, package=pkg)


def test_a_target_hooked_by_two_patches_is_refused(package):
    pkg = package(
        {"unified": ">=0.5.23"},
        extra_patch="""
        from sglang_overlay.core.registry import Patch, Target
        PATCH = Patch(id="other", title="t", description="o.md", process="any", position=2,
                      targets=(Target("sglang.srt.x", "A.f", "elsewhere:f"),))
    """,
    )
    with pytest.raises(RegistryError, match="sglang.srt.x.A.f is hooked by two patches: demo and other"):
        discover_patches(ANY_UPSTREAM, package=pkg)


def test_a_knob_is_validated_when_read():
    knob = Knob("SGLANG_OVERLAY_X", "5", "m", kind="number", minimum=0)
    assert knob.read({}) == 5.0 and knob.read({"SGLANG_OVERLAY_X": " 7 "}) == 7.0
    with pytest.raises(ValueError, match="SGLANG_OVERLAY_X='-1': must be >= 0"):
        knob.read({"SGLANG_OVERLAY_X": "-1"})
    with pytest.raises(ValueError, match="expected a number"):
        knob.read({"SGLANG_OVERLAY_X": "fast"})
