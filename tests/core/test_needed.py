"""``core.needed`` and ``check --needed``: the probes' frame (the probes themselves: tests/patches/<id>/test_probe.py).

A probe that is missing, raises or returns something else is "cannot tell" with the reason (never a traceback);
a release folder's probe takes precedence over its patch's; the exit code says what to do.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sglang_overlay.core import needed
from sglang_overlay.core.registry import (
    CANNOT_TELL,
    FIXED_UPSTREAM,
    NEEDED,
    Finding,
    Patch,
    RegistryError,
    Release,
    Target,
)
from tests.support.env import subprocess_env


def finds_it() -> Finding:
    return Finding(NEEDED, "upstream still does the wrong thing")


def raises() -> Finding:
    raise RuntimeError("upstream moved\nits class")


def returns_text() -> str:
    return "needed"


@pytest.mark.parametrize(
    "spec, verdict, says",
    [
        (None, CANNOT_TELL, "the patch declares no probe of upstream's bug"),
        (f"{__name__}:finds_it", NEEDED, "upstream still does the wrong thing"),
        (
            f"{__name__}:raises",
            CANNOT_TELL,
            f"the probe {__name__}:raises failed: RuntimeError: upstream moved its class",
        ),
        (f"{__name__}:returns_text", CANNOT_TELL, "returned str, not a Finding"),
        (f"{__name__}:nowhere", CANNOT_TELL, "failed: AttributeError"),
    ],
)
def test_a_probe_is_run_and_every_failure_is_cannot_tell_with_the_reason(spec, verdict, says):
    found, seconds = needed.run_probe(spec)
    assert found.verdict == verdict and says in found.evidence and "\n" not in found.evidence
    assert seconds >= 0


@pytest.mark.parametrize("verdict, evidence", [("maybe", "x"), (NEEDED, ""), (NEEDED, "two\nlines")])
def test_a_finding_is_one_of_three_verdicts_with_one_line(verdict, evidence):
    with pytest.raises(RegistryError):
        Finding(verdict, evidence)


def test_a_probe_is_declared_as_module_function():
    with pytest.raises(RegistryError, match="probe 'nocolon' must be 'module:function'"):
        Patch(id="x", title="t", description="x.md", process="any", probe="nocolon", targets=(Target("m", "f", "h:f"),))


def test_the_release_folders_probe_takes_precedence_over_the_patchs():
    target = Target("m", "f", "pkg.hooks:f")
    release = Release(">=0.5.23", targets=(Target("m", "g", "pkg.r.hooks:g"),), folder="r", probe="pkg.r.probe:probe")
    patch = Patch(id="x", title="t", description="x.md", process="any", targets=(target,), releases=(release,),
                  probe="pkg.probe:probe")  # fmt: skip
    assert patch.for_upstream("0.5.23").probe == "pkg.r.probe:probe"
    assert patch.for_upstream("0.5.22").probe == "pkg.probe:probe"


@pytest.mark.parametrize(
    "verdicts, code",
    [([NEEDED, NEEDED], 0), ([NEEDED, FIXED_UPSTREAM], 1), ([NEEDED, CANNOT_TELL], 2),
     ([FIXED_UPSTREAM, CANNOT_TELL], 1)],
)  # fmt: skip
def test_the_exit_code_says_what_to_do(verdicts, code):
    rows = [{"verdict": v, "enabled": True} for v in verdicts]
    assert needed.exit_code(rows) == code
    assert needed.exit_code([*rows, {"verdict": FIXED_UPSTREAM, "enabled": False}]) == code  # a disabled one: no


@pytest.mark.ci_slow  # a fresh interpreter runs every probe (imports upstream's modules: tens of seconds)
def test_check_needed_reports_every_shipped_patch_as_needed_with_its_evidence():
    """The done-when of the probes on this pin: every patch needed, each with what upstream does wrong."""
    from sglang_overlay.core.installed import installed_sglang_version
    from sglang_overlay.core.registry import discover_patches

    out = subprocess.run([sys.executable, "-m", "sglang_overlay", "check", "--needed", "--json"], capture_output=True,
                         text=True, timeout=600, env=subprocess_env())  # fmt: skip
    report = json.loads(out.stdout)
    assert report["sglang"] == installed_sglang_version()
    rows = {r["patch"]: r for r in report["patches"]}
    assert set(rows) == {p.id for p in discover_patches(installed_sglang_version())}
    assert {r["verdict"] for r in rows.values()} == {NEEDED}, json.dumps(rows, indent=2)
    assert all(len(r["evidence"]) > 40 for r in rows.values())
    assert out.returncode == 0, out.stderr[-2000:]
    table = subprocess.run([sys.executable, "-m", "sglang_overlay", "check", "--needed"], capture_output=True,
                           text=True, timeout=600, env=subprocess_env())  # fmt: skip
    assert table.returncode == 0 and "every enabled patch is still needed" in table.stdout


def test_no_test_keeps_an_xfail_of_upstreams_path_beside_the_probes():
    """The probes are the single record of upstream's behaviour: a strict xfail that records it again (as the
    boundary tests' ``upstream`` parametrizations did) is refused here, whichever way it is spelled."""
    import ast

    from tests.support.env import REPO

    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, (ast.Attribute, ast.Name))
                and getattr(node, "attr", getattr(node, "id", "")) == "xfail"
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, f"xfails beside the probes (assert on the patch's probe instead): {found}"
