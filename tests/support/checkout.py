"""A throw-away copy of this checkout for tests that walk the maintainer's documented steps.

``copy_checkout(root)`` puts the checkout's tracked files (their working-tree content) in a fresh git
repository at ``root``; ``changed(root)`` is what differs from that first commit (new files included).
The real tree is never written. Cost: about 1 s and a few MB per copy.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.env import REPO


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return proc.stdout


def copy_checkout(root: Path) -> Path:
    for rel in git(REPO, "ls-files", "-z").split("\0"):
        if rel and (REPO / rel).is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, root / rel)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    return root


def changed(root: Path) -> set[str]:
    git(root, "add", "-A", "--intent-to-add")
    return {line[3:] for line in git(root, "status", "--porcelain", "--untracked-files=all").splitlines()}
