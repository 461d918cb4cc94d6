"""What mutation testing mutates and runs for each patch on the installed release (``scripts/mutation_test.py``).

Job: per patch, the modules of its root and of each release folder, and the tests that exercise them; the folder
serving the installed sglang comes from the registry (``Patch.release_for``). Invariant: a release folder not
declared here is refused, so a new folder cannot go unmutated. Cost: one registry walk (no sglang import).
"""

from __future__ import annotations

from dataclasses import dataclass, field

PKG = "sglang_overlay/patches"
TESTS = "tests/patches"


@dataclass(frozen=True)
class Target:
    """One patch on the installed release: the modules mutmut mutates and the tests it may run."""

    modules: tuple[str, ...]
    tests: tuple[str, ...]
    subprocess_tests: tuple[str, ...] = field(default=())  # pytest args, run per "no tests" mutant
    deselect: str = ""  # -k expression of tests left out (a subprocess that only re-checks hooking, say)


@dataclass(frozen=True)
class Declared:
    """One patch as declared here: its root's modules and tests, and each release folder's own. The folder
    serving the installed sglang comes from the registry (``release_for``); a folder not named here is
    refused, so a new release folder cannot go unmutated."""

    patch: str  # the patch id
    modules: tuple[str, ...]  # relative to the patch's package, mutated on every release
    tests: tuple[str, ...]  # relative to tests/patches/<package>/ (a folder collects what applies here)
    releases: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]  # folder -> (its modules, its tests)
    subprocess_tests: tuple[str, ...] = field(default=())
    deselect: str = ""


DECLARED = {
    "moe": Declared(
        "moe-cp-compaction",
        modules=("layout", "producers", "batch_layout", "rows", "boundary"),
        tests=("test_layout.py", "test_batch_layout.py", "test_boundary.py"),
        releases={"forward_context": (("forward",), ("test_boundary_rows.py", "test_boundary_guards.py",
                                                     "test_startup.py"))},
        deselect="not the_plugin_path_hooks_the_boundary",  # a fresh interpreter per mutant, hooking only
    ),
    "abort": Declared(
        "openai-abort-status",
        modules=("status", "streaming"),
        tests=("test_status_normalize.py", "test_stream_wrapper.py"),
        releases={"status_range": (("finish_reason",), ("test_normalize_then_upstream.py",))},
        subprocess_tests=("test_lora_release.py", "-k", "exactly_once or normal_finish"),
    ),
    "hicache": Declared(
        "cp-hicache-owner-lanes",
        modules=("planner", "leaf_index", "metadata", "counters"),
        tests=("",),  # the patch's whole test folder: the conftest collects the serving folder's tests only
        releases={"unified": (("state", "gate", "capacity", "host_backup", "planning", "eviction", "lane_tree"), ())},
    ),
    "cluster": Declared(
        "cluster-consistency",
        modules=("state", "verdict", "exchange"),
        tests=("test_exchange.py", "test_verdict.py", "test_state.py"),
        # each folder's hook module only re-exports the shared AFTER hook: nothing of its own to mutate
        releases={"parallel_runtime": ((), ("test_hook_point.py",))},
    ),
}  # fmt: skip


def serving_folder(patch_id: str, version: str | None) -> str:
    """The release folder of ``patch_id`` serving sglang ``version`` (from the registry); SystemExit if none."""
    from sglang_overlay.core.registry import ANY_UPSTREAM, discover_patches

    (patch,) = [p for p in discover_patches(ANY_UPSTREAM) if p.id == patch_id]
    release = patch.release_for(version) if version else None
    if release is None:
        raise SystemExit(f"no release folder of {patch_id} serves the installed sglang {version}")
    return release.folder


def resolve(declared: Declared, version: str | None) -> Target:
    """The modules and tests of ``declared`` on sglang ``version``: its root's and its serving folder's."""
    folder = serving_folder(declared.patch, version)
    if folder not in declared.releases:
        raise SystemExit(f"{declared.patch}: release folder {folder}/ serves sglang {version} but is not declared "
                         f"in scripts/mutation_targets.py (only {sorted(declared.releases)}): say what to mutate there")  # fmt: skip
    package, tests = declared.patch.replace("-", "_"), f"{TESTS}/{declared.patch.replace('-', '_')}"
    own_modules, own_tests = declared.releases[folder]
    modules = (*declared.modules, *(f"{folder}/{m}" for m in own_modules))
    return Target(
        modules=tuple(f"{PKG}/{package}/{m}.py" for m in modules),
        tests=tuple(f"{tests}/{t}" for t in declared.tests) + tuple(f"{tests}/{folder}/{t}" for t in own_tests),
        subprocess_tests=tuple(f"{tests}/{a}" if a.endswith(".py") else a for a in declared.subprocess_tests),
        deselect=declared.deselect,
    )
