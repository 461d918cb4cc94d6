"""The source form behaves as the runtime form: the patch suites, run against a pristine copy of
the pinned upstream with the series applied (runtime hooks off through its markers), give the same
outcomes as with the runtime hooks. The suites are the existing ones, parametrized over both forms
by SGLANG_OVERLAY_TEST_FORM (tests/conftest.py), not written twice."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sglang_overlay.core.registry import discover_patches, package_name
from tests.conftest import REPO, subprocess_env
from tests.support.series_forms import apply_script, run_suite, upstream_copy

SERIES = [p for p in discover_patches() if not p.extra]
SERIES_IDS = sorted(p.id for p in SERIES)


def patch_suite(patch) -> str:
    """A patch's own tests: tests/patches/<its folder name>/ (derived from the registry)."""
    return f"tests/patches/{package_name(patch.id)}"


# Every patch's tests marked `representative` (default run); every patch's whole suite behind slow.
REPRESENTATIVE = [patch_suite(p) for p in SERIES] + ["-m", "representative"]
FULL = [patch_suite(p) for p in SERIES]


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory):
    """A pristine copy of the installed pinned sglang as an upstream checkout, the series applied."""
    root = upstream_copy(tmp_path_factory.mktemp("upstream"))
    proc = apply_script("--source", str(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def source_env(root, **extra):
    env = subprocess_env(**extra)
    env["PYTHONPATH"] = f"{root / 'python'}:{env['PYTHONPATH']}"
    return env


HICACHE = next(p for p in SERIES if p.id == "cp-hicache-owner-lanes")
# its load-back target in the installed pin (0.5.20: HiRadixCache.load_back; 0.5.23:
# UnifiedRadixCache._load_back_transfers), and the targets on the same class
LOAD_BACK = next(t for t in HICACHE.targets if "load_back" in t.attribute)
OWNER = LOAD_BACK.qualname.rsplit(".", 1)[0]
ON_OWNER = [t for t in HICACHE.targets if t.qualname.startswith(OWNER + ".")]

PROBE = r"""
import json
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
import sglang
import {module} as h
from sglang_overlay.core.hooking import _chain_holds, status
from sglang_overlay.core.registry import discover_patches, package_name
owner = h.{owner}
m = getattr(owner, "{attribute}")
holds = {{t.path: _chain_holds(owner.__dict__[t.attribute], t.resolve_hook(), owner.__dict__[t.attribute].__wrapped__)
         for p in discover_patches() for t in p.targets if t.qualname.startswith("{owner}.")}}
print("REPORT" + json.dumps({{
    "file": sglang.__file__, "registry": sorted(HookRegistry._hooks), "status": status(), "holds": holds,
    "name": m.__name__, "inner": m.__wrapped__.__code__.co_name, "layers": hasattr(m.__wrapped__, "__wrapped__"),
}}))
""".format(module=LOAD_BACK.module, owner=OWNER, attribute=LOAD_BACK.attribute)


def probe(root, **extra) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE], env=source_env(root, **extra), cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("REPORT", 1)[1])


def test_source_form_runs_the_hooks_once_and_the_runtime_hooks_stay_off(source_tree):
    report = probe(source_tree)
    assert report["file"].startswith(str(source_tree / "python" / "sglang"))
    assert report["registry"] == []  # nothing registered with SGLang's HookRegistry: no second wrapper
    assert report["status"]["source_form"] == SERIES_IDS
    # importing the load-back module imports every module the patch hooks (0.5.20: three, 0.5.23: one)
    assert len(report["status"]["applied"]["cp-hicache-owner-lanes"]) == len(HICACHE.targets)
    assert "moe-cp-compaction" not in report["status"]["applied"]  # deepseek_v2 not imported: not counted
    assert report["name"] == LOAD_BACK.attribute
    assert report["inner"] == f"_sglang_overlay_upstream_{LOAD_BACK.attribute}"
    assert report["layers"] is False  # one wrapper around upstream's own definition
    # ... holding the patch's hook itself (re-bound once the module executed): the runtime form's wrapper
    assert len(report["holds"]) == len(ON_OWNER) and all(report["holds"].values()), report["holds"]


def test_a_disabled_patch_passes_through_in_the_source_form(source_tree):
    report = probe(source_tree, SGLANG_OVERLAY_DISABLE="cp-hicache-owner-lanes")
    assert "cp-hicache-owner-lanes" not in report["status"]["applied"]
    assert "cp-hicache-owner-lanes" not in report["status"]["source_form"]
    assert not any(report["holds"].values())  # upstream runs through a pass-through, not the hooks


def test_the_source_form_needs_no_plugin(source_tree):
    """SGLANG_PLUGINS without the overlay: SGLang skips the plugin, the sources still carry the hooks."""
    report = probe(source_tree, SGLANG_PLUGINS="not_the_overlay")
    assert report["status"]["started"] is False  # the overlay's plugin never ran
    assert len(report["holds"]) == len(ON_OWNER) and all(report["holds"].values())


@pytest.mark.parametrize("plugins", [None, "not_the_overlay"])
def test_check_verifies_the_source_form(source_tree, plugins):
    env = source_env(source_tree, **({"SGLANG_PLUGINS": plugins} if plugins else {}))
    proc = subprocess.run([sys.executable, "-m", "sglang_overlay", "check", "--json"], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"], proc.stdout + proc.stderr
    assert report["plugin_discoverable"] is (plugins is None)
    assert report["source_form"] == SERIES_IDS
    assert {r["fingerprint"] for r in report["targets"]} == {"source"}


COUNT_PARSES = r"""
import sglang_overlay.core.source_form as sf
calls = []
parse = sf.source_fingerprint
sf.source_fingerprint = lambda source, qualname: calls.append(qualname) or parse(source, qualname)
from sglang_overlay.core.verify import make_plan
plan = make_plan()
print("PARSED", len(calls), sorted({str(s.status) for v in plan.statuses.values() for s in v}))
"""


def parsed_at_start_up(root) -> str:
    proc = subprocess.run([sys.executable, "-c", COUNT_PARSES], env=source_env(root), cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split("PARSED ", 1)[1].strip()


def test_start_up_verifies_unchanged_source_form_files_by_their_seal(source_tree):
    """Every patched file is byte-for-byte what the series generated: no module is parsed."""
    assert parsed_at_start_up(source_tree) == "0 ['source']"


def test_check_reports_an_edited_source_form(source_tree, tmp_path):
    """An upstream definition edited after the series was applied: source-drift, not OK."""
    import ast
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(source_tree, edited, ignore=shutil.ignore_patterns("__pycache__"))
    chat = edited / "python" / "sglang" / "srt" / "entrypoints" / "openai" / "serving_chat.py"
    lines = chat.read_text().splitlines(keepends=True)
    tree = ast.parse("".join(lines))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "OpenAIServingChat")
    fn = next(n for n in cls.body if getattr(n, "name", "") == "_sglang_overlay_upstream__handle_streaming_request")
    lines.insert(fn.body[0].lineno - 1, " " * fn.body[0].col_offset + "edited_after_the_series = True\n")
    chat.write_text("".join(lines))
    proc = subprocess.run([sys.executable, "-m", "sglang_overlay", "check", "--json"], env=source_env(edited),
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and not report["ok"]
    rows = {r["target"]: r for r in report["targets"]}
    bad = rows["sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._handle_streaming_request"]
    assert bad["fingerprint"] == "source-drift" and "upstream definition under the source form" in bad["detail"]
    assert sum(r["fingerprint"] == "source-drift" for r in report["targets"]) == 1
    # the edited file's seal no longer holds: its one target is fingerprinted from the AST, no other
    assert parsed_at_start_up(edited) == "1 ['source', 'source-drift']"


def compare_forms(selection, source_tree, tmp_path):
    runtime = run_suite(selection, "runtime", source_tree, tmp_path / "runtime.xml")
    source = run_suite(selection, "source", source_tree, tmp_path / "source.xml")
    assert runtime, "the selection collected no test"
    assert sum(o == "passed" for o in runtime.values()) >= len(runtime) // 2
    # a source-form skip would hide a difference; only the other pin's tests (skipped in both forms) are left out
    assert not [k for k, v in source.items() if v == "skipped" and runtime.get(k) != "skipped"]
    assert source == runtime, {k: (runtime.get(k), source.get(k)) for k in set(runtime) | set(source)
                               if runtime.get(k) != source.get(k)}
    return runtime


def test_representative_patch_tests_give_the_same_outcomes_in_both_forms(source_tree, tmp_path):
    outcomes = compare_forms(REPRESENTATIVE, source_tree, tmp_path)
    suites = {name.split("::")[0].split(".")[2] for name, outcome in outcomes.items() if outcome == "passed"}
    assert suites == {package_name(p.id) for p in SERIES}  # every patch is represented by tests that ran


@pytest.mark.slow
def test_every_patch_suite_gives_the_same_outcomes_in_both_forms(source_tree, tmp_path):
    compare_forms(FULL, source_tree, tmp_path)
