"""Where test code lives: shared helpers in ``tests/support/`` (or a release folder's support module), shared
fixtures in a ``conftest.py``; no test module imports another (a helper a second module needs moves out)."""

from __future__ import annotations

import ast

from tests.support.env import REPO


def test_no_test_module_imports_another():
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names
                      if n.startswith("tests.") and (n.rsplit(".", 1)[-1].startswith("test_") or n.endswith("conftest"))]  # fmt: skip
    assert not found, f"move what these take into tests/support/ or a conftest.py: {found}"
