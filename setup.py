"""Package discovery and the process-start hook for setuptools (metadata lives in pyproject.toml).

Every ``sglang_overlay*`` package is found, so a new patch folder ships without an edit here.
``patches/`` (descriptions, and ``pins/<version>/`` with each supported pin's lock, ``pins/default``
naming the default) ships inside the package as ``sglang_overlay.data``, so an installed overlay reads
the same locks.

The wheel also carries ``sglang_overlay_process_start.pth`` at its root (site-packages once installed):
the one-line hook that enters the processes SGLang starts without ``load_plugins()``. Written by
``build_py`` from ``sglang_overlay.core.process_hook.PTH_LINE``, so the shipped line is the one the
package checks for; pip lists it in RECORD, so ``pip uninstall`` removes it and an upgrade replaces it.
"""

import ast
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _process_hook() -> tuple[str, str]:
    """PTH_NAME and PTH_LINE, read from process_hook.py without importing the package."""
    tree = ast.parse((HERE / "sglang_overlay" / "core" / "process_hook.py").read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("PTH_NAME", "PTH_LINE"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found["PTH_NAME"], found["PTH_LINE"]


class BuildWithProcessHook(build_py):
    """build_py, plus the ``.pth`` hook at the root of the build (so of the wheel)."""

    def run(self):
        super().run()
        name, line = _process_hook()
        target = Path(self.build_lib) / name
        target.write_text(line, encoding="utf-8")

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / _process_hook()[0])]


setup(
    packages=find_packages(
        include=["sglang_overlay", "sglang_overlay.*", "sglang_overlay_gsm8k", "sglang_overlay_gsm8k.*"]
    )
    + ["sglang_overlay.data"],
    package_dir={"sglang_overlay.data": "patches"},
    package_data={"sglang_overlay.data": ["*.md", "pins/default", "pins/*/upstream.lock"]},
    cmdclass={"build_py": BuildWithProcessHook},
)
