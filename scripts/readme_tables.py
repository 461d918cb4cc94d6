"""The generated tables of the README and the docs, each written from the registry into the page it belongs to.

``python scripts/readme_tables.py --write`` rewrites every block between its markers; ``--check`` exits 1 when
one is stale (CI's lint). The blocks:

- ``patches`` (README.md) and ``patches-docs`` (docs/patches/index.md): position, id, what it fixes, the process
  it runs in, whether it is still needed on the default pin (``sglang-overlay check --needed``: each patch's
  probe of upstream's bug), and its description;
- ``knobs`` (docs/operators/environment.md): each patch's environment variables;
- ``release-ranges`` (docs/maintainers/patches.md, first in its per-release section): one line per sglang range,
  the release folders declaring it and the supported pins it serves;
- ``releases`` (docs/maintainers/patches.md): every release folder with the sglang range it serves.

Invariants: only the text between a block's markers changes; the registry is read for every release (a patch
served by one release folder is listed). The "still needed" column is the one part that runs upstream code: the
default tier's test (``tests/core/test_readme.py``) feeds the committed verdicts back and checks every other
cell, lint runs the probes. Cost: one import of the declarations; with the probes, an import of the upstream
modules they exercise (about 12 s on the 2-core machine).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sglang_overlay.core.lockfile import default_version, pin_dirs  # noqa: E402
from sglang_overlay.core.registry import ANY_UPSTREAM, FIXED_UPSTREAM, NEEDED, Patch, discover_patches  # noqa: E402

DEFAULT_PIN = default_version(REPO / "patches")
NEEDED_CELL = {NEEDED: "yes", FIXED_UPSTREAM: "no (fixed upstream)"}  # anything else: "cannot tell"


def begin(name: str) -> str:
    return f"<!-- BEGIN generated: {name} (python scripts/readme_tables.py --write) -->"


def end(name: str) -> str:
    return f"<!-- END generated: {name} -->"


def needed_cells() -> dict[str, str]:
    """Each patch's "still needed" cell, from its probe on the installed sglang (which must be the default pin)."""
    from sglang_overlay.core import installed, needed

    version = installed.installed_sglang_version()
    if version != DEFAULT_PIN:
        raise ValueError(f"the 'still needed' column is the default pin's ({DEFAULT_PIN}); installed: {version}")
    return {row["patch"]: NEEDED_CELL.get(row["verdict"], "cannot tell") for row in needed.findings(version)}


def _patch_rows(patches: list[Patch], needed: dict[str, str], link: Callable[[Patch], str]) -> list[str]:
    head = f"| # | id | what it fixes | process | still needed on {DEFAULT_PIN} | description |"
    rows = [head, "|---|---|---|---|---|---|"]
    rows += [f"| {p.position} | `{p.id}` | {p.title} | {p.process} | {needed.get(p.id, '?')} | {link(p)} |"
             for p in patches]  # fmt: skip
    return rows


def patches_readme(patches: list[Patch], needed: dict[str, str]) -> list[str]:
    return _patch_rows(patches, needed, lambda p: f"[`patches/{p.description}`](patches/{p.description})")


def patches_docs(patches: list[Patch], needed: dict[str, str]) -> list[str]:
    return _patch_rows(patches, needed, lambda p: f"[{p.id}]({p.description})")


def knobs(patches: list[Patch], needed: dict[str, str]) -> list[str]:
    rows = ["| patch | variable | default | meaning |", "|---|---|---|---|"]
    return rows + [f"| `{p.id}` | `{k.name}` | `{k.default}` | {k.meaning} |" for p in patches for k in p.knobs]


def releases(patches: list[Patch], needed: dict[str, str]) -> list[str]:
    rows = ["| patch | release folder | serves sglang | targets |", "|---|---|---|---|"]
    for p in patches:
        folder = p.package.replace(".", "/")
        rows += [f"| `{p.id}` | `{folder}/` (every release) | any | {len(p.targets)} |"] if p.targets else []
        rows += [f"| `{p.id}` | `{folder}/{r.folder}/` | `{r.upstream}` | {len(r.targets)} |" for r in p.releases]
    return rows


def release_ranges(patches: list[Patch], needed: dict[str, str]) -> list[str]:
    rows = ["| release folders | serve sglang | supported pins served |", "|---|---|---|"]
    ranges: dict[str, list] = {}
    for p in patches:
        for r in p.releases:
            ranges.setdefault(r.upstream, []).append((r, f"`{r.folder}/` ({p.id})"))
    for spec, folders in ranges.items():
        pins = ", ".join(v for v in pin_dirs() if folders[0][0].applies_to(v)) or "none"
        rows.append(f"| {', '.join(name for _, name in folders)} | `{spec}` | {pins} |")
    return rows


# block name -> (the page, the rows)
BLOCKS: dict[str, tuple[Path, Callable[[list[Patch], dict[str, str]], list[str]]]] = {
    "patches": (REPO / "README.md", patches_readme),
    "patches-docs": (REPO / "docs" / "patches" / "index.md", patches_docs),
    "knobs": (REPO / "docs" / "operators" / "environment.md", knobs),
    "release-ranges": (REPO / "docs" / "maintainers" / "patches.md", release_ranges),
    "releases": (REPO / "docs" / "maintainers" / "patches.md", releases),
}


def with_block(text: str, name: str, rows: list[str]) -> str:
    """``text`` with block ``name`` replaced by ``rows``; ValueError when it lacks the block's markers."""
    if begin(name) not in text or end(name) not in text:
        raise ValueError(f"the page lacks the generated block {name!r} ({begin(name)} ... {end(name)})")
    head, rest = text.split(begin(name), 1)
    return head + "\n".join([begin(name), "", *rows, "", end(name)]) + rest.split(end(name), 1)[1]


def current_needed(text: str) -> dict[str, str]:
    """The "still needed" cells a page's ``patches`` block holds now (id -> cell)."""
    block = text.split(begin("patches"), 1)[1].split(end("patches"), 1)[0]
    cells = [line.split("|") for line in block.splitlines() if line.startswith("| ") and "`" in line]
    return {row[2].strip().strip("`"): row[5].strip() for row in cells}


def rendered(needed: dict[str, str]) -> dict[Path, tuple[str, str]]:
    """Each page with its blocks: path -> (the text now, the text generated)."""
    patches = discover_patches(ANY_UPSTREAM)
    pages: dict[Path, tuple[str, str]] = {}
    for name, (page, rows) in BLOCKS.items():
        text = page.read_text(encoding="utf-8")
        old, new = pages.get(page, (text, text))
        pages[page] = (old, with_block(new, name, rows(patches, needed)))
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite every generated block")
    mode.add_argument("--check", action="store_true", help="exit 1 when a block is stale")
    parser.add_argument("--keep-needed", action="store_true", help="keep the README's 'still needed' cells instead "
                        "of running the probes (no sglang needed)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        readme = BLOCKS["patches"][0].read_text(encoding="utf-8")
        pages = rendered(current_needed(readme) if args.keep_needed else needed_cells())
    except (ValueError, LookupError) as exc:
        print(f"readme_tables: {exc}", file=sys.stderr)
        return 2
    stale = [page for page, (old, new) in pages.items() if old != new]
    if args.write:
        for page in stale:
            page.write_text(pages[page][1], encoding="utf-8")
        print("rewritten: " + (", ".join(str(p.relative_to(REPO)) for p in stale) or "nothing (already current)"))
        return 0
    for page in stale:
        print(f"{page.relative_to(REPO)}: the generated tables are stale: python scripts/readme_tables.py --write",
              file=sys.stderr)  # fmt: skip
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
