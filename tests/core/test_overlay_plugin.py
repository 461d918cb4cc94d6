"""The overlay through SGLang's own plugin path, in fresh interpreters, on the real upstream (tier ci_slow).

Uses the test-only patch tests/support/demo_patch.py (RadixKey.page_aligned) with a lock generated for it,
plus the shipped patches of the installed pin: every target of its lock hooked through HookRegistry, and a
hand-edited fingerprint of a real target refusing start-up naming it.
"""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from sglang_overlay.version import __version__
from tests.support.demo import DEMO_TARGET, demo_env
from tests.support.proc import HOOK_REPORT, hook_report, run_cli, run_python

pytestmark = pytest.mark.ci_slow  # fresh interpreters that import sglang: seconds each


def lock_with(lock_path, tmp_path, mutate) -> str:
    data = json.loads(lock_path.read_text())
    mutate(data)
    out = tmp_path / "mutated.lock"
    out.write_text(json.dumps(data))
    return str(out)


LOAD_AND_REPORT = """
import json, sys
from sglang_overlay.core import propagation
walks, walk = [], propagation._walk  # count what each restricted walk is given (the product keeps no count)
propagation._walk = lambda modules: (walks.append(len(modules := list(modules))), walk(modules))[1]
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang_overlay.core.hooking import status
before = status()
lazy = {m: m in sys.modules for m in ("sglang.srt.mem_cache.radix_cache", "sglang.srt.models.deepseek_v2")}
from sglang.srt.mem_cache.radix_cache import RadixKey
from tests.support import demo_patch
result = RadixKey([1, 2, 3, 4, 5]).page_aligned(2)
print("REPORT" + json.dumps({"before": before, "after": status(), "lazy": lazy,
                             "calls": demo_patch.CALLS["page_aligned"], "len": len(result),
                             "walks": walks, "modules": len(sys.modules)}))
"""


def report(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT")][-1]
    return json.loads(line[len("REPORT") :])


def test_load_plugins_applies_lazily_through_entry_point(demo_lock):
    rep = report(run_python(LOAD_AND_REPORT, **demo_env(demo_lock)))
    # load_plugins() imported no patch-target module, so the demo target was pending, not applied.
    assert rep["lazy"] == {"sglang.srt.mem_cache.radix_cache": False, "sglang.srt.models.deepseek_v2": False}
    assert "sglang.srt.mem_cache.radix_cache" in rep["before"]["pending_modules"]
    assert "demo-radix-key" not in rep["before"]["applied"]
    # Importing the module hooked it; the hook ran once and upstream's result came back unchanged.
    assert rep["after"]["applied"]["demo-radix-key"] == [DEMO_TARGET]
    assert rep["calls"] == 1 and rep["len"] == 4
    # HookRegistry's walk for stale bindings, once per deferred target module, visited only the modules that module's
    # import brought in: all walks together fewer than sys.modules holds (upstream's walk: each all of them)
    assert rep["walks"] and sum(rep["walks"]) < rep["modules"], (rep["walks"], rep["modules"])


def test_every_shipped_patch_is_wrapped_after_its_modules_import():
    """The real series: after importing each patch's target modules, every target holds the overlay's hook."""
    code = """
    import importlib, json
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang_overlay.core.hooking import status
    from sglang_overlay.core.introspection import chain_holds
    from sglang_overlay.core.introspection import raw_attribute, resolve_owner
    from sglang_overlay.core import lockfile
    from sglang_overlay.core.registry import discover_patches
    patches = discover_patches(lockfile.read_pin().version)
    out = {}
    for p in patches:
        for t in p.targets:
            importlib.import_module(t.module)
            cur = raw_attribute(resolve_owner(t.module, t.owner_path), t.attribute)
            innermost = cur.__func__ if isinstance(cur, (classmethod, staticmethod)) else cur
            while hasattr(innermost, "__wrapped__"):
                innermost = innermost.__wrapped__
            out[t.path] = innermost is not cur and chain_holds(cur, t.resolve_hook(), innermost)
    print("REPORT" + json.dumps({"status": status(), "targets": out, "ids": [p.id for p in patches]}))
    """
    rep = report(run_python(code))
    applied = rep["status"]["applied"]
    for pid in rep["ids"]:
        assert pid in applied, f"{pid} not applied: {rep['status']}"
    for path, holds_hook in rep["targets"].items():
        assert holds_hook, f"{path} is not wrapped by the overlay's hook"
    assert rep["status"]["pending_modules"] == []


def test_every_target_of_the_installed_pins_lock_is_hooked_through_load_plugins():
    report = hook_report(run_python(HOOK_REPORT, timeout=300))
    installed = importlib.metadata.version("sglang")
    assert report["pin"] == installed and report["lock"].endswith(f"patches/pins/{installed}/upstream.lock")
    assert report["wrapped"] and all(report["wrapped"].values()), report["wrapped"]
    applied = {path for paths in report["status"]["applied"].values() for path in paths}
    assert applied == set(report["wrapped"]), report["status"]
    from sglang_overlay.core.registry import discover_patches

    assert set(report["status"]["applied"]) == {p.id for p in discover_patches(installed)}  # every patch of the pin


def test_a_drifted_fingerprint_of_a_real_target_refuses_start_up(tmp_path):
    from sglang_overlay.core import lockfile

    data = lockfile.read_lock()
    target, entry = sorted(data["targets"].items())[0]
    entry["fingerprint"] = "sha256:" + "0" * 64
    lock = tmp_path / "upstream.lock"
    lock.write_text(json.dumps(data))
    proc = run_python(HOOK_REPORT, timeout=300, SGLANG_OVERLAY_LOCK=str(lock))
    assert proc.returncode != 0
    assert target in proc.stderr and f"patch '{entry['patch']}'" in proc.stderr


def test_importing_the_package_changes_nothing():
    code = """
    import sys, json
    before_meta = list(sys.meta_path); before = set(sys.modules)
    import sglang_overlay, sglang_overlay.plugin, sglang_overlay.core.registry
    new = sorted(m for m in set(sys.modules) - before if m.startswith("sglang."))
    print("REPORT" + json.dumps({"meta_path_same": sys.meta_path == before_meta, "sglang_modules": new,
                                 "started": sglang_overlay.core.hooking.status()["started"]}))
    """
    rep = report(run_python(code))
    assert rep == {"meta_path_same": True, "sglang_modules": [], "started": False}


def test_explicit_apply_for_embedders(demo_lock):
    code = """
    import json, sglang_overlay
    st = sglang_overlay.apply()
    again = sglang_overlay.apply()
    from sglang.srt.mem_cache.radix_cache import RadixKey
    RadixKey([1, 2]).page_aligned(1)
    from tests.support import demo_patch
    print("REPORT" + json.dumps({"calls": demo_patch.CALLS["page_aligned"], "same": st == again}))
    """
    assert report(run_python(code, **demo_env(demo_lock))) == {"calls": 1, "same": True}


# ----------------------------------------------------------------------------- strict failures

LOAD_ONLY = """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang_overlay.core.hooking import status
print("STATUS", status())
"""


def test_fingerprint_drift_refuses_start_naming_patch_target_and_fingerprints(demo_lock, tmp_path):
    bad = "sha256:" + "0" * 64
    lock = lock_with(demo_lock, tmp_path, lambda d: d["targets"][DEMO_TARGET].update(fingerprint=bad))
    proc = run_python(LOAD_ONLY, **demo_env(lock))
    assert proc.returncode == 1
    msg = proc.stderr
    assert "sglang-overlay refused to start" in msg
    assert "patch 'demo-radix-key'" in msg and DEMO_TARGET in msg
    assert f"expected {bad}" in msg and "found sha256:" in msg
    assert "SGLANG_OVERLAY_DISABLE=demo-radix-key" in msg and "rebase-check" in msg
    assert "STATUS" not in proc.stdout


def test_missing_target_refuses_start(tmp_path):
    mod = tmp_path / "missing_patch.py"
    mod.write_text(
        "from sglang_overlay.core.registry import Patch, Target\n"
        "PATCH = Patch(id='demo-missing', title='t', description='-', process='any', targets=(\n"
        "  Target('sglang.srt.mem_cache.radix_cache', 'RadixKey.no_such_method', 'tests.support.demo_patch:count_page_aligned'),))\n"
    )
    proc = run_python(
        LOAD_ONLY,
        SGLANG_OVERLAY_EXTRA_PATCHES="missing_patch",
        PYTHONPATH=f"{tmp_path}:{__import__('tests.support.env').support.env.REPO}",
    )
    assert proc.returncode == 1
    assert "patch 'demo-missing'" in proc.stderr and "missing in the installed upstream" in proc.stderr
    assert "no_such_method" in proc.stderr


def test_hook_that_did_not_take_fails_at_import(tmp_path):
    """An AROUND hook on a class: SGLang's HookRegistry only logs its TypeError; the overlay refuses."""
    from tests.support.env import REPO

    mod = tmp_path / "class_patch.py"
    mod.write_text(
        "from sglang_overlay.core.registry import Patch, Target\n"
        "PATCH = Patch(id='demo-class', title='t', description='-', process='any', targets=(\n"
        "  Target('sglang.srt.mem_cache.radix_cache', 'RadixKey', 'tests.support.demo_patch:count_page_aligned'),))\n"
    )
    lock = tmp_path / "class.lock"
    from sglang_overlay.core import lockfile

    lock.write_text(lockfile.default_lock_path().read_text())
    env = {
        "SGLANG_OVERLAY_EXTRA_PATCHES": "class_patch",
        "SGLANG_OVERLAY_LOCK": str(lock),
        "PYTHONPATH": f"{tmp_path}:{REPO}",
    }
    assert run_cli("lock", "--include-extra", **env).returncode == 0
    proc = run_python(LOAD_ONLY, **env)
    assert proc.returncode != 0
    assert "patch 'demo-class'" in proc.stderr and "the hook did not take" in proc.stderr
    # Non-strict: the patch is skipped with one warning and the process carries on.
    proc = run_python(LOAD_ONLY, SGLANG_OVERLAY_STRICT="0", **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "skipping patch 'demo-class'" in proc.stderr
    assert "'demo-class'" in proc.stdout.split("skipped")[1]


def test_wrong_sglang_version_refuses_unless_opted_out(demo_lock, tmp_path):
    found = importlib.metadata.version("sglang")
    other = f"{found}.post99"  # another release, in the same target scope as the installed one
    lock = lock_with(demo_lock, tmp_path, lambda d: d["upstream"].update(version=other))
    proc = run_python(LOAD_ONLY, **demo_env(lock))
    assert proc.returncode == 1
    assert (
        f"sglang-overlay {__version__} does not support the installed sglang {found}: its lock pins sglang=={other}"
        in proc.stderr
    )
    proc = run_python(LOAD_ONLY, **demo_env(lock, SGLANG_OVERLAY_ALLOW_UNPINNED="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "demo-radix-key" in proc.stdout
    # Opting out of the version pin still enforces per-target fingerprints.
    both = lock_with(
        demo_lock,
        tmp_path,
        lambda d: (
            d["upstream"].update(version=other),
            d["targets"][DEMO_TARGET].update(fingerprint="sha256:" + "1" * 64),
        ),
    )
    proc = run_python(LOAD_ONLY, **demo_env(both, SGLANG_OVERLAY_ALLOW_UNPINNED="1"))
    assert proc.returncode == 1 and "fingerprint drift" in proc.stderr


def test_non_strict_skips_the_drifted_patch_whole_with_one_warning(demo_lock, tmp_path):
    lock = lock_with(demo_lock, tmp_path, lambda d: d["targets"][DEMO_TARGET].update(fingerprint="sha256:" + "2" * 64))
    proc = run_python(LOAD_ONLY, **demo_env(lock, SGLANG_OVERLAY_STRICT="0"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("skipping patch 'demo-radix-key'") == 1
    status = proc.stdout.split("STATUS", 1)[1]
    assert "'applied': {" in status and "demo-radix-key'" not in status.split("'skipped'")[0]


def test_disable_turns_a_patch_off_and_rejects_unknown_ids(demo_lock):
    proc = run_python(LOAD_ONLY, **demo_env(demo_lock, SGLANG_OVERLAY_DISABLE="demo-radix-key"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "demo-radix-key" not in proc.stdout
    proc = run_python(LOAD_ONLY, **demo_env(demo_lock, SGLANG_OVERLAY_DISABLE="no-such-patch"))
    assert proc.returncode == 1 and "unknown patch id(s) ['no-such-patch']" in proc.stderr
