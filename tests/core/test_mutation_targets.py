"""``scripts/mutation_test.py`` mutates what serves the installed release: each patch's root modules and those of
its release folder serving the installed sglang (from the registry), with that folder's tests; a release
folder the script does not declare is refused, so a new one cannot go unmutated."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace

import pytest

from sglang_overlay.core.installed import installed_sglang_version
from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches
from tests.support.env import REPO


@pytest.fixture(scope="module")
def mutation_test():
    spec = importlib.util.spec_from_file_location("mutation_test", REPO / "scripts" / "mutation_test.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation_test", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["moe", "abort", "hicache", "cluster"])
def test_the_installed_releases_folder_is_mutated_with_its_tests(mutation_test, name):
    declared = mutation_test.DECLARED[name]
    (patch,) = [p for p in discover_patches(ANY_UPSTREAM) if p.id == declared.patch]
    folder = patch.release_for(installed_sglang_version()).folder
    target = mutation_test.resolve(declared, installed_sglang_version())
    own_modules, own_tests = declared.releases[folder]  # a folder may have nothing of its own to mutate
    assert [m.rpartition(f"/{folder}/")[2] for m in target.modules if f"/{folder}/" in m] == [
        f"{o}.py" for o in own_modules
    ]
    assert [t.rpartition(f"/{folder}/")[2] for t in target.tests if f"/{folder}/" in t] == list(own_tests)
    assert not any(
        f"/{other.folder}/" in m for other in patch.releases if other.folder != folder for m in target.modules
    )
    assert all((REPO / path).is_file() for path in target.modules), target.modules
    assert all((REPO / path).exists() for path in target.tests), target.tests
    assert {r.folder for r in patch.releases} == set(declared.releases)  # every folder says what it mutates


def test_an_undeclared_release_folder_is_refused(mutation_test):
    declared = mutation_test.DECLARED["moe"]
    with pytest.raises(SystemExit, match="is not declared in scripts/mutation_targets.py"):
        mutation_test.resolve(replace(declared, releases={}), installed_sglang_version())


def test_a_sampled_patch_score_carries_its_wilson_interval():
    sys.path.insert(0, str(REPO / "scripts"))
    from mutation_report import patch_score, wilson

    low, high = wilson(95, 100)
    assert round(low, 3) == 0.888 and round(high, 3) == 0.978  # the textbook 95% Wilson interval
    rows = [dict(killed=40, total=45, equivalent=3, generated=300, sampled=True),
            dict(killed=55, total=55, equivalent=0, generated=400, sampled=True)]  # fmt: skip
    score = patch_score(rows)
    assert (score["killed"], score["counted"], score["tested"], score["generated"]) == (95, 97, 100, 700)
    assert score["interval_95"] == wilson(95, 97) and "interval_95" not in patch_score([{**rows[0], "sampled": False}])
