"""The GSM8K runner is a component of its own: the plugin never imports it or its extra (httpx, tqdm,
matplotlib), the runner uses nothing of the plugin but its version, and without the extra the command says
what to install and exits 2."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_overlay_gsm8k import extra
from tests.support.env import GSM8K_DIR, REPO, subprocess_env
from tests.support.proc import VENV_BIN, run_python

RUNNER_ROOTS = {"httpx", "tqdm", "matplotlib", "sglang_overlay_gsm8k"}
# The one place the plugin's package may name the runner: the `sglang-overlay gsm8k` dispatch, inside main();
# and httpx in the client of `status --url` for another host (the CLI's, never a server process's: the probe).
ALLOWED_IN_PLUGIN = {
    ("sglang_overlay/cli/__init__.py", "sglang_overlay_gsm8k.cli"),
    ("sglang_overlay/observe/http_status.py", "httpx"),
}

# Runs in a fresh interpreter. Upstream's own plugin machinery (sglang.srt.plugins) already imports httpx
# and tqdm, so "in sys.modules" cannot tell who imported them: the probe evicts them (upstream keeps its
# references) and records every import statement that reaches them from then on, with the importing line.
PROBE = """
import importlib, json, pkgutil, sys, traceback
ROOTS = %r
import sglang.srt.plugins as plugins
upstream_has = sorted(r for r in ROOTS if r in sys.modules)
for name in [m for m in sys.modules if m.split(".")[0] in ROOTS]:
    del sys.modules[name]
seen, phase = [], ["load_plugins()"]

class Recorder:
    def find_spec(self, fullname, path=None, target=None):
        if fullname in ROOTS:
            frames = [f for f in traceback.extract_stack()[:-1]
                      if "importlib" not in f.filename and not f.filename.startswith("<frozen")]
            seen.append({"phase": phase[0], "module": fullname,
                         "importer": f"{frames[-1].filename}:{frames[-1].lineno}"})
        return None

sys.meta_path.insert(0, Recorder())
plugins.load_plugins()
from sglang_overlay.core import hooking
status = hooking.status()
phase[0] = "importing every sglang_overlay module"
import sglang_overlay
modules = [m.name for m in pkgutil.walk_packages(sglang_overlay.__path__, "sglang_overlay.")
           if not m.name.endswith("__main__")]
for name in modules:
    importlib.import_module(name)
print(json.dumps({"upstream_has": upstream_has, "seen": seen, "status": status, "modules": len(modules),
                  "plugin_file": sys.modules["sglang_overlay.plugin"].__file__}))
"""


@pytest.mark.ci_slow  # a fresh interpreter runs SGLang's load_plugins()
def test_the_plugin_imports_nothing_of_the_runner_or_its_extra():
    """SGLang's load_plugins() (the overlay's load(), as in every SGLang process), then every module of the
    plugin's package: no import statement reaches httpx, tqdm, matplotlib or sglang_overlay_gsm8k."""
    proc = run_python(PROBE % (RUNNER_ROOTS,), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(result["plugin_file"]).is_relative_to(REPO)  # this checkout's plugin ran
    assert result["status"]["started"] and result["status"]["pending_patches"]  # load() really applied the overlay
    assert result["modules"] >= 10
    assert result["seen"] == []
    # what upstream itself brings: recorded so a change there is visible, not a claim about the overlay
    assert set(result["upstream_has"]) <= {"httpx", "tqdm"}


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_no_plugin_module_names_the_runner_or_its_extra_even_lazily():
    """Also imports inside functions (hooks run late, where the probe above cannot see them)."""
    found = set()
    for path in (REPO / "sglang_overlay").rglob("*.py"):
        rel = path.relative_to(REPO).as_posix()
        found |= {(rel, m) for m in _imports(path) if m.split(".")[0] in RUNNER_ROOTS}
    assert found == ALLOWED_IN_PLUGIN


def test_the_runner_uses_nothing_of_the_plugin_but_its_version():
    used = {
        (path.name, m)
        for path in (REPO / "sglang_overlay_gsm8k").glob("*.py")
        for m in _imports(path)
        if m.split(".")[0] == "sglang_overlay"
    }
    assert used == {("session.py", "sglang_overlay.version")}
    tree = ast.parse((REPO / "sglang_overlay_gsm8k" / "session.py").read_text(encoding="utf-8"))
    names = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "sglang_overlay.version"
        for a in n.names
    }
    assert names == {"__version__"}


def test_every_runner_module_says_what_it_does():
    for path in (REPO / "sglang_overlay_gsm8k").glob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc and len(doc) > 80, path.name


# --------------------------------------------------------------------------- without the extra


def _shadow(tmp_path: Path, broken: dict[str, str]) -> Path:
    """A directory that, first on PYTHONPATH, makes each named package fail to import with the given error:
    how an environment without the extra (or with a broken install of it) looks to Python."""
    root = tmp_path / "shadow"
    for name, error in broken.items():
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(f"raise {error}\n")
    return root


def _absent(name: str) -> str:
    return f"ModuleNotFoundError(\"No module named '{name}'\", name={name!r})"


COMMANDS = {
    "console script": [str(VENV_BIN / "sglang-overlay"), "gsm8k"],
    "scripts/gsm8k_eval.py": [sys.executable, str(REPO / "scripts" / "gsm8k_eval.py")],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    "broken,named,detail",
    [
        ({n: _absent(n) for n in extra.PACKAGES}, "httpx, tqdm, matplotlib", None),
        (
            {"matplotlib": "ImportError('numpy.core.multiarray failed to import')"},
            "matplotlib",
            "matplotlib: numpy.core.multiarray failed to import",
        ),
    ],
    ids=["all-absent", "matplotlib-broken"],
)
def test_without_the_extra_the_command_says_what_to_install_and_exits_2(tmp_path, command, broken, named, detail):
    shadow = _shadow(tmp_path, broken)
    env = subprocess_env(PYTHONPATH=os.pathsep.join([str(shadow), str(REPO)]))
    proc = subprocess.run(
        [
            *COMMANDS[command],
            "--base-url",
            "http://127.0.0.1:9",
            "--data-dir",
            str(GSM8K_DIR),
            "--no-download",
            "--output",
            str(tmp_path / "out"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last.startswith(f"sglang-overlay gsm8k: missing {named} from the runner's gsm8k extra")
    assert last.endswith("install it with: pip install 'sglang-overlay[gsm8k]'")
    assert (detail in last) if detail else "(" not in last
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # stopped before anything was written


def test_help_needs_no_extra(tmp_path):
    shadow = _shadow(tmp_path, {n: _absent(n) for n in extra.PACKAGES})
    env = subprocess_env(PYTHONPATH=os.pathsep.join([str(shadow), str(REPO)]))
    proc = subprocess.run(
        [*COMMANDS["console script"], "--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "--base-url" in proc.stdout
