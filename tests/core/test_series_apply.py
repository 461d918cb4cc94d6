"""The diff series (patches/series, patches/NNNN-<id>.patch) against the pristine pinned upstream:
up to date with the registry, applies with scripts/apply_patches.sh, idempotent, refused whole."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_overlay.core import lockfile, series as series_diff, source_form
from sglang_overlay.core.introspection import find_definition
from sglang_overlay.core.fingerprint import TargetNotFound, fingerprint_source
from sglang_overlay.core.registry import discover_patches
from tests.conftest import REPO, subprocess_env
from tests.support.series_forms import APPLY, apply_script, pin_folder, pristine_package_dir, tree_hash

SERIES = [p for p in discover_patches() if not p.extra]
PIN = pin_folder()  # the installed pin's series: patches/ or patches/pins/<version>/
FIRST = SERIES[0].targets[0]  # a target of the first patch, to break on purpose


def patched_files() -> list[str]:
    """The sglang files the series touches (relative to the package directory)."""
    package = pristine_package_dir()
    return sorted({series_diff.module_relpath(t.module, package) for p in SERIES for t in p.targets})


def minimal_checkout(root: Path) -> Path:
    """root/python/sglang/... holding exactly the pristine files the series touches: all that
    git apply reads (the full-package copy is built once, in test_series_equivalence)."""
    package = pristine_package_dir()
    for rel in patched_files():
        dest = root / "python" / "sglang" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(package / rel, dest)
    return root


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_overlay", *args], cwd=REPO, env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)


def break_context_of(root_package: Path, target) -> None:
    """Change the line after the target's ``def`` line, as an upstream edit would: a hunk context."""
    path = root_package / series_diff.module_relpath(target.module, pristine_package_dir())
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    node = find_definition(ast.parse("".join(lines)), target.qualname)
    lines[node.lineno] = lines[node.lineno].rstrip("\n") + "  # changed upstream\n"
    path.write_text("".join(lines), encoding="utf-8")


# --------------------------------------------------------------------------- generation


def test_committed_series_is_what_the_registry_generates():
    proc = run_cli("series", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(SERIES)} patch(es) up to date" in proc.stdout
    names = (PIN / "series").read_text().split()
    assert names == [series_diff.patch_file_name(p.position, p) for p in SERIES]


def test_series_check_fails_on_an_upstream_the_diffs_no_longer_match(tmp_path):
    root = minimal_checkout(tmp_path)
    break_context_of(root / "python" / "sglang", FIRST)
    proc = run_cli("series", "--check", "--upstream", str(root / "python" / "sglang"))
    assert proc.returncode == 1
    assert f"{series_diff.patch_file_name(SERIES[0].position, SERIES[0])} is stale" in proc.stderr
    assert "sglang-overlay series --write" in proc.stderr


def test_every_patch_is_in_format_patch_form_with_its_description():
    for patch in SERIES:
        text = (PIN / series_diff.patch_file_name(patch.position, patch)).read_text()
        head, _, rest = text.partition("\n\n")
        assert head.splitlines()[0].startswith("From 0000000000000000000000000000000000000000 ")
        assert f"Subject: [PATCH {patch.position:04d}] {patch.id}: " in head
        description = (REPO / "patches" / patch.description).read_text()
        assert description.partition("\n")[2].strip() in rest  # the message body, trailers included
        assert "## When it can be dropped" in rest and "\nTested: " in rest
        for target in patch.targets:  # exactly one rename and one re-binding per target
            attr = target.attribute
            same_name = sum(1 for t in patch.targets if t.attribute == attr)  # e.g. one method in two classes
            assert len([l for l in text.splitlines() if l.startswith("+") and f"def {source_form.upstream_name(attr)}(" in l]) == same_name
            assert len([l for l in text.splitlines() if l.startswith("-") and f"def {attr}(" in l]) == same_name
            assert f"{attr} = {source_form.HELPER}({target.path!r}, {source_form.upstream_name(attr)})" in text
        diffs = text.split("\ndiff --git", 1)[1].rsplit("\n-- \n", 1)[0]  # up to the signature
        upstream_files = [d for d in diffs.split("\ndiff --git ") if "_sglang_overlay_series/" not in d.split("\n", 1)[0]]
        changed = [l for d in upstream_files for l in d.splitlines()
                   if l[:1] in "+-" and not l.startswith(("+++", "---"))]
        # nothing but renames, re-bindings, the helper import, the resolve call (and a blank line)
        renamed = tuple(f"def {t.attribute}(" for t in patch.targets)
        removed = [l for l in changed if l.startswith("-")]
        assert len(removed) == len(patch.targets) and all(any(r in l for r in renamed) for l in removed), removed
        assert all("sglang_overlay" in l or "sglang-overlay" in l or l == "+" for l in changed if l.startswith("+"))


def test_the_source_form_keeps_each_upstream_definition_verbatim():
    """Under the source form, every renamed definition, its name restored, fingerprints as the lock says;
    a changed body or a missing re-binding is caught."""
    package = pristine_package_dir()
    lock = lockfile.read_lock()
    for patch in SERIES:
        by_file = {}
        for t in patch.targets:
            by_file.setdefault(series_diff.module_relpath(t.module, package), []).append(t)
        for rel, targets in by_file.items():
            before = (package / rel).read_text(encoding="utf-8")
            after = series_diff.transform(before, targets, patch.id)
            for t in targets:
                assert source_form.source_fingerprint(after, t.qualname) == lock["targets"][t.path]["fingerprint"]
                with pytest.raises(TargetNotFound):
                    fingerprint_source(after, t.qualname)  # the plain name is no definition any more
    t = FIRST
    after = series_diff.transform((package / series_diff.module_relpath(t.module, package)).read_text(), [t], "x")
    lines = after.splitlines(keepends=True)
    owner, _, attr = t.qualname.rpartition(".")
    body = find_definition(ast.parse(after), f"{owner}.{source_form.upstream_name(attr)}").body[0]
    lines.insert(body.lineno - 1, " " * body.col_offset + "upstream_edit = 1\n")
    edited = "".join(lines)
    assert source_form.source_fingerprint(edited, t.qualname) != lock["targets"][t.path]["fingerprint"]
    unbound = "\n".join(l for l in after.splitlines() if not l.lstrip().startswith(f"{t.attribute} = {source_form.HELPER}("))
    with pytest.raises(TargetNotFound, match="assignment"):
        source_form.source_fingerprint(unbound, t.qualname)


# --------------------------------------------------------------------------- applying


def test_apply_twice_second_run_says_already_applied_and_changes_nothing(tmp_path):
    root = minimal_checkout(tmp_path / "checkout")
    first = apply_script("--source", str(root))
    assert first.returncode == 0, first.stdout + first.stderr
    for patch in SERIES:
        assert f"applied {series_diff.patch_file_name(patch.position, patch)}" in first.stdout
        assert (root / "python" / "sglang" / source_form.marker_relpath(patch.id)).is_file()
    assert set(source_form.applied_series(root / "python" / "sglang")) == {p.id for p in SERIES}
    applied = tree_hash(root)
    second = apply_script("--source", str(root))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "already applied" in second.stdout
    assert tree_hash(root) == applied


def _repo_copy_with(tmp_path: Path, edit) -> Path:
    """A copy of scripts/apply_patches.sh + patches/ (the script finds the series next to itself)."""
    fake = tmp_path / "repo"
    (fake / "scripts").mkdir(parents=True)
    shutil.copy2(APPLY, fake / "scripts" / APPLY.name)
    shutil.copytree(REPO / "patches", fake / "patches", ignore=shutil.ignore_patterns("__pycache__"))
    edit(fake / "patches")
    return fake


def test_corrupted_hunk_in_the_last_patch_is_refused_and_the_tree_is_untouched(tmp_path):
    last = (PIN / series_diff.patch_file_name(SERIES[-1].position, SERIES[-1])).relative_to(REPO / "patches")

    def corrupt(patches: Path):
        text = (patches / last).read_text()
        line = next(l for l in text.splitlines() if l.startswith("-") and "def " in l)
        (patches / last).write_text(text.replace(line, line.replace("def ", "def corrupted_"), 1))

    fake = _repo_copy_with(tmp_path, corrupt)
    root = minimal_checkout(tmp_path / "checkout")
    pristine = tree_hash(root)
    proc = apply_script("--source", str(root), script=fake / "scripts" / APPLY.name)
    assert proc.returncode == 1
    assert "refusing: the series does not apply" in proc.stderr and "nothing was changed" in proc.stderr
    assert "patch failed" in proc.stderr or "does not apply" in proc.stderr
    assert tree_hash(root) == pristine  # the earlier patches, which do apply, were not applied either


def test_upstream_that_moved_under_a_hunk_is_refused_untouched(tmp_path):
    root = minimal_checkout(tmp_path)
    break_context_of(root / "python" / "sglang", FIRST)
    before = tree_hash(root)
    proc = apply_script("--source", str(root))
    assert proc.returncode == 1 and "refusing" in proc.stderr
    assert tree_hash(root) == before


def test_partly_patched_tree_is_refused_untouched(tmp_path):
    root = minimal_checkout(tmp_path)
    first = PIN / series_diff.patch_file_name(SERIES[0].position, SERIES[0])
    subprocess.run(["git", "apply", "-p1", str(first)], cwd=root, check=True,
                   env={**subprocess_env(), "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)})
    before = tree_hash(root)
    proc = apply_script("--source", str(root))
    assert proc.returncode == 1 and "partly patched" in proc.stderr
    assert tree_hash(root) == before


def test_source_needs_an_upstream_checkout(tmp_path):
    proc = apply_script("--source", str(tmp_path))
    assert proc.returncode == 1 and "no python/sglang/ inside" in proc.stderr


def test_site_packages_mode_patches_the_environments_sglang(tmp_path):
    """--site-packages finds sglang through the environment's interpreter and strips python/."""
    site = tmp_path / "site"
    checkout = minimal_checkout(tmp_path / "checkout")
    shutil.copytree(checkout / "python" / "sglang", site / "sglang")
    (site / "sglang" / "__init__.py").write_text("")  # a package for find_spec; never imported here
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    (venv / "bin" / "python").chmod(0o755)
    proc = apply_script("--site-packages", "--venv", str(venv))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(source_form.applied_series(site / "sglang")) == {p.id for p in SERIES}
    target = site / "sglang" / series_diff.module_relpath(FIRST.module, pristine_package_dir())
    assert f"def {source_form.upstream_name(FIRST.attribute)}(" in target.read_text()
    again = apply_script("--site-packages", "--venv", str(venv))
    assert again.returncode == 0 and "already applied" in again.stdout


def test_git_am_turns_each_patch_into_a_commit_with_its_description(tmp_path):
    root = minimal_checkout(tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    env = {**subprocess_env(), "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "pristine sglang"]):
        subprocess.run(git + args, cwd=root, env=env, check=True)
    files = [str(PIN / name) for name in (PIN / "series").read_text().split()]
    subprocess.run(git + ["am", "-q", *files], cwd=root, env=env, check=True, capture_output=True)
    log = subprocess.run(git + ["log", "--format=%s%n%b%x00"], cwd=root, env=env, check=True,
                         capture_output=True, text=True).stdout.split("\0")
    for message, patch in zip(log, reversed(SERIES)):
        assert message.strip().startswith(f"{patch.id}: ")
        assert "## When it can be dropped" in message and "Confidence:" in message
