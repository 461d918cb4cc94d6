"""Generate the patch series (``patches/series``, ``patches/NNNN-<id>.patch``) from the registry.

Each diff is derived from the patch's declaration and the pristine pinned
upstream, never written by hand, so the source form and the runtime overlay
cannot disagree: per target, the upstream definition is renamed to
``_sglang_overlay_upstream_<name>`` (decorators and body untouched) and one
assignment after it wraps it with the patch's hook (``sglang_overlay.core.source_form``);
each patched file gains one import of that helper and, as its last line, the call
that resolves its hooks once it has executed; each patch adds its marker
file ``python/sglang/srt/_sglang_overlay_series/<id>.py``. Patches apply in
order (a later patch diffs the tree as the earlier ones left it).

``sglang-overlay series --write`` regenerates the files; ``--check`` exits 1
when the committed ones differ from what would be generated.

Invariants: generation is deterministic (fixed author and date: regenerating is byte-identical);
each patch's file is named and numbered by its declared position, so adding a patch touches no
other patch's file; the README's generated tables come from the same declarations. Cost: one
parse per patched upstream file, at maintainer time only (never at start-up).
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from sglang_overlay.core import lockfile, source_form
from sglang_overlay.core.introspection import find_definition
from sglang_overlay.core.registry import Patch, Target, discover_patches

REPO_PREFIX = "python/sglang/"  # upstream repository path of the sglang package
AUTHOR = "sglang-overlay <dev@sglang-overlay.invalid>"
DATE = "Thu, 1 Jan 1970 00:00:00 +0000"  # fixed: regenerating must be byte-identical
SERIES_FILE = "series"


class SeriesError(RuntimeError):
    """The series cannot be generated (upstream not pristine, a target not a function)."""


@dataclass(frozen=True)
class PatchFile:
    name: str  # NNNN-<patch-id>.patch
    text: str


def patch_file_name(index: int, patch: Patch) -> str:
    return f"{index:04d}-{patch.id}.patch"


def module_relpath(module: str, package_dir: Path) -> str:
    """``sglang.srt.x.y`` -> ``srt/x/y.py`` (or ``srt/x/y/__init__.py``) under the sglang package."""
    parts = module.split(".")
    if parts[0] != "sglang":
        raise SeriesError(f"target module {module} is not inside sglang")
    rel = "/".join(parts[1:])
    if (package_dir / rel).is_dir():
        return f"{rel}/__init__.py"
    return f"{rel}.py"


# --------------------------------------------------------------------------- the transformation


def _import_line_index(tree: ast.Module, first_target_line: int) -> int:
    """0-based line index where the helper import goes: after the last top-level import
    above the first patched definition (else after the docstring)."""
    best = 0
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(getattr(tree.body[0], "value", None), ast.Constant):
        best = tree.body[0].end_lineno
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and stmt.end_lineno < first_target_line:
            best = max(best, stmt.end_lineno)
    return best


def transform(source: str, targets: list[Target], patch_id: str) -> str:
    """The source form of ``targets`` inside one module's source."""
    if not source.endswith("\n"):
        raise SeriesError("upstream file does not end with a newline")
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    edits: list[tuple[int, str, str]] = []  # (0-based line, "rename"|"insert", text)
    first_line = None
    for target in targets:
        node = find_definition(tree, target.qualname)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise SeriesError(f"{target.path}: the source form wraps functions only, found {type(node).__name__}")
        top = find_definition(tree, target.qualname.split(".")[0])
        top_line = min([top.lineno] + [d.lineno for d in getattr(top, "decorator_list", [])])
        first_line = top_line if first_line is None else min(first_line, top_line)
        index = node.lineno - 1
        pattern = re.compile(rf"^(\s*(?:async\s+)?def\s+){re.escape(node.name)}(\s*\()")
        renamed, count = pattern.subn(rf"\g<1>{source_form.upstream_name(node.name)}\g<2>", lines[index], count=1)
        if count != 1:
            raise SeriesError(f"{target.path}: cannot find 'def {node.name}(' on line {node.lineno}")
        edits.append((index, "rename", renamed))
        indent = lines[index][: node.col_offset]
        assignment = (
            f"{indent}{node.name} = {source_form.HELPER}({target.path!r}, {source_form.upstream_name(node.name)})"
            f"  # sglang-overlay: {patch_id}\n"
        )
        edits.append((node.end_lineno, "insert", assignment))
    if source_form.IMPORT_LINE + "\n" not in lines:  # the first patch touching the file
        edits.append((_import_line_index(tree, first_line), "insert", source_form.IMPORT_LINE + "\n"))
        edits.append((len(lines), "insert", "\n" + source_form.RESOLVE_LINE + "\n"))
    # bottom-up so line numbers stay valid; at one index the rename precedes an insert there
    for index, kind, text in sorted(edits, key=lambda e: (e[0], e[1] == "rename"), reverse=True):
        if kind == "rename":
            lines[index] = text
        else:
            lines.insert(index, text)
    out = "".join(lines)
    ast.parse(out)  # the source form must stay valid Python
    return out


# --------------------------------------------------------------------------- diffs


def file_diff(rel: str, before: str | None, after: str) -> str:
    path = REPO_PREFIX + rel
    head = [f"diff --git a/{path} b/{path}\n"]
    if before is None:
        head.append("new file mode 100644\n")
    head += ["--- /dev/null\n" if before is None else f"--- a/{path}\n", f"+++ b/{path}\n"]
    return "".join(head) + "".join(_hunks((before or "").splitlines(keepends=True), after.splitlines(keepends=True)))


def _range(start: int, length: int) -> str:
    return f"{start + 1 if length else start},{length}" if length != 1 else f"{start + 1}"


def _hunks(a: list[str], b: list[str], context: int = 3):
    """Unified-diff hunks (difflib.unified_diff's format) without difflib's autojunk, which in a
    file over 200 lines stops blank lines from anchoring and turns an insertion next to a rename
    into a removed-and-re-added blank line."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2] - first[1])} +{_range(first[3], last[4] - first[3])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            yield from ("-" + line for line in a[i1:i2])
            yield from ("+" + line for line in b[j1:j2])


def _diffstat(diffs: list[str]) -> str:
    rows, plus, minus = [], 0, 0
    for diff in diffs:
        name = diff.split("\n", 1)[0].split(" b/", 1)[1]
        body = [l for l in diff.splitlines() if not l.startswith(("+++", "---"))]
        p = sum(l.startswith("+") for l in body)
        m = sum(l.startswith("-") for l in body)
        plus, minus = plus + p, minus + m
        rows.append((name, p, m))
    width = max(len(n) for n, _, _ in rows)
    out = [f" {n.ljust(width)} | {p + m} {'+' * p}{'-' * m}" for n, p, m in rows]
    out.append(f" {len(rows)} files changed, {plus} insertions(+), {minus} deletions(-)")
    return "\n".join(out) + "\n"


def format_patch(patch: Patch, description: str, diffs: list[str], pin: str) -> str:
    """``git format-patch`` form: mail header, the description as the message, diffstat, diffs.

    The subject carries the patch's declared position, not "i/total": adding a patch leaves every
    other patch file byte-identical."""
    title, _, body = description.partition("\n")
    subject = title.lstrip("# ").strip() or f"{patch.id}: {patch.title}"
    if not subject.startswith(patch.id):
        subject = f"{patch.id}: {subject}"
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: {AUTHOR}\n"
        f"Date: {DATE}\n"
        f"Subject: [PATCH {patch.position:04d}] {subject}\n"
        "\n"
        f"{body.strip()}\n"
        "---\n"
        f"{_diffstat(diffs)}"
        "\n"
        + "".join(diffs)
        + f"-- \nsglang-overlay series over sglang=={pin}\n"
    )


def generate(package_dir: Path, patches_dir: Path | None = None) -> list[PatchFile]:
    """The series of the pin in use from the registry and the pristine sglang package at ``package_dir``
    (descriptions read from ``patches_dir``, default ``patches/``)."""
    package_dir = Path(package_dir)
    if source_form.applied_series(package_dir):
        raise SeriesError(f"{package_dir} carries the series already (sglang-overlay markers): "
                          "generate against a pristine sglang")
    patches_dir = Path(patches_dir or lockfile.patches_dir())  # the descriptions: one per patch, every pin
    pin = lockfile.read_pin().version
    series = [p for p in discover_patches(pin) if not p.extra]
    tree: dict[str, str] = {}  # rel path -> content as the earlier patches left it
    out = []
    for patch in series:
        by_file: dict[str, list[Target]] = {}
        for target in patch.targets:
            by_file.setdefault(module_relpath(target.module, package_dir), []).append(target)
        diffs, files = [], {}
        for rel, targets in by_file.items():
            if rel not in tree:
                try:
                    tree[rel] = (package_dir / rel).read_text(encoding="utf-8")
                except FileNotFoundError as exc:
                    raise SeriesError(f"patch {patch.id}: no {rel} in {package_dir}") from exc
            after = transform(tree[rel], targets, patch.id)
            diffs.append(file_diff(rel, tree[rel], after))
            tree[rel] = after
            files[targets[0].module] = source_form.file_digest(after)
        marker = source_form.render_marker(patch, source_form.diff_digest(diffs), files)
        diffs.append(file_diff(source_form.marker_relpath(patch.id), None, marker))
        description = (patches_dir / patch.description).read_text(encoding="utf-8")
        out.append(PatchFile(patch_file_name(patch.position, patch), format_patch(patch, description, diffs, pin)))
    return out


def shipped_markers(patches_dir: Path | None = None) -> dict[str, dict]:
    """Patch id -> the marker each shipped patch file creates (what applying it records)."""
    patches_dir = Path(patches_dir or lockfile.default_lock_path().parent)
    out = {}
    for path in sorted(patches_dir.glob("[0-9][0-9][0-9][0-9]-*.patch")):
        section = path.read_text(encoding="utf-8").split("\ndiff --git ")
        marker = [d for d in section if "/_sglang_overlay_series/" in d.split("\n", 1)[0]]
        if not marker:
            continue
        hunk = marker[0].split("\n@@", 1)[1].split("\n", 1)[1].split("\n-- \n", 1)[0]
        text = "".join(line[1:] + "\n" for line in hunk.splitlines() if line.startswith("+"))
        try:
            record = source_form.read_marker(path, text)
        except source_form.SourceFormError:
            continue
        out[record["id"]] = record
    return out


def series_text(files: list[PatchFile]) -> str:
    return "".join(f"{f.name}\n" for f in files)


def write(files: list[PatchFile], patches_dir: Path) -> list[Path]:
    """Write the series, removing patch files that are no longer part of it."""
    keep = {f.name for f in files}
    for stale in patches_dir.glob("[0-9][0-9][0-9][0-9]-*.patch"):
        if stale.name not in keep:
            stale.unlink()
    written = []
    for f in files:
        path = patches_dir / f.name
        path.write_text(f.text, encoding="utf-8")
        written.append(path)
    (patches_dir / SERIES_FILE).write_text(series_text(files), encoding="utf-8")
    return written


def differences(files: list[PatchFile], patches_dir: Path) -> list[str]:
    """What differs between the committed series and ``files`` (empty: up to date)."""
    problems = []
    series = patches_dir / SERIES_FILE
    if not series.exists() or series.read_text(encoding="utf-8") != series_text(files):
        problems.append(f"{series} is missing or lists other patches")
    keep = {f.name for f in files}
    for stale in sorted(patches_dir.glob("[0-9][0-9][0-9][0-9]-*.patch")):
        if stale.name not in keep:
            problems.append(f"{stale} is not part of the series any more")
    for f in files:
        path = patches_dir / f.name
        if not path.exists():
            problems.append(f"{path} is missing")
        elif path.read_text(encoding="utf-8") != f.text:
            changed = sum(1 for l in difflib.unified_diff(path.read_text(encoding="utf-8").splitlines(), f.text.splitlines(), n=0)
                          if l[:1] in "+-" and not l.startswith(("+++", "---")))
            problems.append(f"{path} is stale ({changed} line(s) differ from the generated diff)")
    return problems


# --------------------------------------------------------------------------- the README's generated tables

README_BEGIN = "<!-- BEGIN generated by `sglang-overlay series --write`: the series and its knobs -->"
README_END = "<!-- END generated -->"


def readme_block(patches: list[Patch]) -> str:
    """The README's tables of the series (id, process, title, description) and of each patch's knobs."""
    lines = [README_BEGIN, "", "| # | id | process | what it fixes | description |", "|---|---|---|---|---|"]
    lines += [f"| {p.position} | `{p.id}` | {p.role} | {p.title} | [`patches/{p.description}`](patches/{p.description}) |"
              for p in patches]
    knobs = [(p, k) for p in patches for k in p.knobs]
    if knobs:
        lines += ["", "| patch | variable | default | meaning |", "|---|---|---|---|"]
        lines += [f"| `{p.id}` | `{k.name}` | `{k.default}` | {k.meaning} |" for p, k in knobs]
    return "\n".join(lines + ["", README_END])


def readme_with_block(text: str, patches: list[Patch]) -> str:
    """``text`` (the README) with its generated block replaced; SeriesError when it has no block."""
    if README_BEGIN not in text or README_END not in text:
        raise SeriesError(f"README.md lacks the generated block ({README_BEGIN} ... {README_END})")
    head, rest = text.split(README_BEGIN, 1)
    tail = rest.split(README_END, 1)[1]
    return head + readme_block(patches) + tail
