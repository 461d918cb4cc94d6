"""The commands the README and the docs show (``sglang-overlay ...``, ``python -m sglang_overlay``, ``scripts/X.py|sh``,
``nox -s S``; in fenced and indented blocks, a Dockerfile's ``RUN``, inline spans) checked against the real parsers:
the overlay's ``build_parser()`` (the GSM8K runner's for ``gsm8k``), each script's ``add_argument`` calls read with
``ast`` (``_Static``) or its shell ``case`` patterns, ``noxfile.py``'s sessions; and the README's two development
commands against ``.ci/run``. Invariant: only words shaped like flags (``-x``, ``--x=v``) are checked, so
``VERSION``, ``<model>``, ``...`` pass; nothing is run, no script imported; each problem names file, line, command.
Cost: the overlay's and the runner's parsers (no sglang), one ``ast`` parse per script: well under a second.
"""

from __future__ import annotations

import argparse
import ast
import collections
import itertools
import re
import shlex
from pathlib import Path

FLAG = re.compile(r"(--?[A-Za-z][\w-]*)(=.*)?")
SHELL = {"bash", "sh", "shell", "console", "zsh", "dockerfile", "indented", "inline"}  # every line is a command
OUTPUT = {"", "text", "txt", "plain"}  # may show a program's output: an unknown subcommand there is prose
PREFIX = re.compile(r"^(?:\./)?\.venv[^/]*/bin/")
SCRIPT = re.compile(r"^(?:\./)?(scripts/[\w./-]+\.(?:py|sh))$")
Command = collections.namedtuple("Command", "path line text kind tokens lang")  # tokens: subcommand/script first
Problem = collections.namedtuple("Problem", "path line command message")
Problem.__str__ = lambda p: f"{p.path}:{p.line}: `{p.command}`: {p.message}"


def _snippets(text: str):
    """(line, code, lang) of each line of a fenced or indented block (a backslash joins the next), each inline span."""
    fence, prose, prev_blank, in_block, blocks, out = None, [], True, False, [], []
    for no, raw in enumerate(text.splitlines(), 1):
        opened = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", raw)
        prose.append("" if fence or opened else raw)
        if fence and opened and opened.group(2).startswith(fence[0]) and not raw.strip().strip(fence[0][0]):
            fence = None
        elif fence:
            blocks.append((no, raw[fence[1] :] if raw[: fence[1]].isspace() else raw.lstrip(), fence[2]))
        elif opened:
            fence = (opened.group(2), len(opened.group(1)), opened.group(3).lower())
        elif raw.startswith("    ") and (in_block or prev_blank and not raw.lstrip().startswith(("-", "*", "+"))):
            prose[-1], in_block = "", True
            blocks.append((no, raw[4:], "indented"))
        prev_blank, in_block = not raw.strip(), in_block and (not raw.strip() or raw.startswith("    "))
    for no, code, lang in blocks:
        if out and out[-1][3] == no - 1 and out[-1][1].endswith("\\"):
            out[-1] = (out[-1][0], out[-1][1][:-1] + " " + code.strip(), lang, no)
        else:
            out.append((no, code.rstrip(), lang, no))
    yield from (o[:3] for o in out)
    joined = "\n".join(prose)  # the prose, code blanked: a span may cross a line, not a paragraph
    for m in re.finditer(r"(?<!`)(`+)(?!`)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", joined, re.S):
        yield joined.count("\n", 0, m.start()) + 1, m.group(2).replace("\\|", "|").replace("\n", " "), "inline"


def _split(code: str) -> tuple[list[str], bool]:
    """shlex words and operators up to a comment (``[--a | --b]``: no pipe); False: unbalanced, split at spaces."""
    depth, quote, out = 0, "", []
    for i, ch in enumerate(code):
        if ch == "#" and not quote and (i == 0 or code[i - 1].isspace()):
            break
        quote = ("" if ch == quote else quote) if quote else (ch if ch in "'\"" else "")
        depth += (ch == "[") - (ch == "]")
        out.append(" " if ch == "|" and depth > 0 else ch)
    lex = shlex.shlex("".join(out), posix=True, punctuation_chars=";&|")
    lex.whitespace_split, lex.commenters = True, ""
    try:
        return list(lex), True
    except ValueError:
        return re.sub(r"([;&|])", r" \1 ", "".join(out)).split(), False


def _program(words: list[str]) -> tuple[str, list[str]] | None:
    """(kind, program and arguments) of one simple command, or None when it is not one this module checks."""
    words = list(itertools.dropwhile(lambda w: re.match(r"[A-Za-z_]\w*=", w) or w == "RUN", words))
    head, rest = (PREFIX.sub("", words[0]), words[1:]) if words else ("", [])
    if re.fullmatch(r"python[\d.]*", head) and rest[:2] == ["-m", "sglang_overlay"]:
        head, rest = "sglang-overlay", rest[2:]
    elif re.fullmatch(r"python[\d.]*|bash|sh", head) and rest and SCRIPT.match(rest[0]):
        head, rest = rest[0], rest[1:]
    if SCRIPT.match(head):
        return "script", [SCRIPT.match(head).group(1), *rest]
    return ("overlay", rest) if head == "sglang-overlay" and rest else ("nox", ["nox", *rest]) if head == "nox" else None  # fmt: skip


def commands(path: str, text: str) -> tuple[list[Command], list[Problem]]:
    """Every command ``text`` shows, and the lines whose quotes do not balance (checked word by word)."""
    found, problems = [], []
    for no, code, lang in _snippets(text):
        if lang not in SHELL | OUTPUT or not re.search(r"sglang-overlay|sglang_overlay|scripts/|nox", code):
            continue
        code = code.strip().removeprefix("$ ")
        tokens, balanced = _split(code)
        parts, redirected = [[]], False
        for tok in tokens if lang != "dockerfile" or tokens[:1] == ["RUN"] else ():
            if set(tok) <= set(";&|"):
                parts, redirected = [*parts, []], False
            elif re.match(r"\d*[<>]", tok) and not re.fullmatch(r"<[^<>]+>\S*", tok):  # a redirect ends the arguments
                redirected = True
            elif not redirected:
                parts[-1].append(tok)
        progs = [(words, prog) for words in parts if (prog := _program(words))]
        found += [Command(path, no, " ".join(words), kind, tuple(args), lang) for words, (kind, args) in progs]
        if progs and not balanced:
            problems.append(Problem(path, no, code, "unbalanced quotes: checked word by word"))
    return found, problems


def _values(expr, env: dict) -> list | None:
    """The values ``expr`` may have: a literal, a name bound to known values, a tuple of those; None: unknown."""
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        parts = [_values(e, env) for e in expr.elts]
        return None if None in parts else [v for part in parts for v in part]
    return [expr.value] if isinstance(expr, ast.Constant) else env.get(expr.id) if isinstance(expr, ast.Name) else None


class _Static:
    """The option strings a script under ``scripts/`` adds, read with ``ast``: its ``add_argument`` calls and those of
    the functions it calls (its own, or in modules under ``scripts/`` it imports), with the arguments it passes
    (``add_output_flags(ap, png=None)`` adds no ``--png``, ``parse_args(per_tree="--calls")`` adds ``--calls``), loops
    over literal names included; ``visit`` fills (option strings, the calls whose names could not be read)."""

    def __init__(self, scripts: Path):
        self.scripts, self.trees = scripts, {}

    def tree(self, path: Path) -> ast.Module:
        return self.trees.get(path) or self.trees.setdefault(path, ast.parse(path.read_text(encoding="utf-8")))

    def module(self, name: str, level: int, here: Path) -> Path | None:
        stem = (here.parents[level - 1] if level else self.scripts).joinpath(*filter(None, name.split(".")))
        return next((c for c in (stem.parent / f"{stem.name}.py", stem / "__init__.py") if c.is_file()), None)

    def member(self, path: Path, name):
        """``name`` (a str, Name or Attribute) in ``path``: ("fn", file, def), ("mod", file) under scripts/, or None."""
        if isinstance(name, ast.Attribute):
            base = self.member(path, name.value)
            return self.member(base[1], name.attr) if base and base[0] == "mod" else None
        name = name.id if isinstance(name, ast.Name) else name
        for node in self.tree(path).body if isinstance(name, str) else ():
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return "fn", path, node
            for a in getattr(node, "names", ()) if isinstance(node, (ast.Import, ast.ImportFrom)) else ():
                if isinstance(node, ast.Import) and (a.asname or a.name.split(".")[0]) == name:
                    return ("mod", mod) if (mod := self.module(a.name if a.asname else name, 0, path)) else None
                if isinstance(node, ast.ImportFrom) and (a.asname or a.name) == name:
                    src = self.module(node.module or "", node.level, path)
                    return self.member(src, a.name) if src and src != path else None
        sub = self.module(name, 1, path) if path.name == "__init__.py" and isinstance(name, str) else None
        return sub and ("mod", sub)

    def globals(self, path: Path) -> dict:
        return {t.id: v for n in self.tree(path).body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name) and (v := _values(n.value, {})) is not None}  # fmt: skip

    def run(self, path: Path, fn: ast.FunctionDef, call, env: dict, out, stack: tuple) -> None:
        if (path, fn.name) in stack:
            return
        a, scope = fn.args, self.globals(path)
        pos = a.posonlyargs + a.args
        scope |= {p.arg: None for p in pos + a.kwonlyargs}
        defaults = zip(pos[len(pos) - len(a.defaults) :] + a.kwonlyargs, a.defaults + a.kw_defaults)
        scope |= {p.arg: _values(d, {}) for p, d in defaults if d is not None}
        if call:
            scope |= {p.arg: _values(v, env) for p, v in zip(pos, call.args) if not isinstance(v, ast.Starred)}
            scope |= {k.arg: _values(k.value, env) for k in call.keywords if k.arg}
        self.visit(path, fn.body, scope, out, (*stack, (path, fn.name)))

    def visit(self, path: Path, nodes, env: dict, out, stack: tuple) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(node, ast.If):  # ``if x is None`` / ``is not None`` of a known x: the branch it takes
                t = node.test
                none = isinstance(t, ast.Compare) and isinstance(t.ops[0], (ast.Is, ast.IsNot)) and getattr(t.comparators[0], "value", 0) is None  # fmt: skip
                seen = {(v is None) == isinstance(t.ops[0], ast.Is) for v in _values(t.left, env) or ()} if none else set()  # fmt: skip
                taken = seen.pop() if len(seen) == 1 else None
                sub = [node.test, *node.body * (taken is not False), *node.orelse * (taken is not True)]
                self.visit(path, sub, env, out, stack)
                continue
            if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                self.visit(path, [node.iter, *node.orelse], env, out, stack)
                self.visit(path, node.body, {**env, node.target.id: _values(node.iter, env)}, out, stack)
                continue
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                env[node.targets[0].id] = _values(node.value, env)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                for vals in (_values(arg, env) for arg in node.args):
                    out[0].update(v for v in vals or () if isinstance(v, str) and v.startswith("-"))
                    out[1].extend([f"{path.relative_to(self.scripts.parent)}:{node.lineno}"] * (vals is None))
            elif isinstance(node, ast.Call) and (ref := self.member(path, node.func)) and ref[0] == "fn":
                self.run(ref[1], ref[2], node, env, out, stack)
            self.visit(path, ast.iter_child_nodes(node), env, out, stack)


def _shell_flags(text: str) -> set[str]:
    """A shell script's flags: its ``case`` patterns (``--venv)``, ``-h|--help)``) and ``[ "$1" = "--x" ]`` tests."""
    flags = {f.strip() for m in re.finditer(r"^\s*\(?((?:-[-\w]+\s*\|\s*)*-[-\w]+)\s*\)", text, re.M)
             for f in m.group(1).split("|")}  # fmt: skip
    return flags | set(re.findall(r"\$\{?1\b[^\]\n]*?=\s*\"?(--?[A-Za-z][\w-]*)", text))


def _unknown(args, known: set[str]) -> list[str]:
    """The flag-shaped words of ``args`` (``[--a|--b]`` is two, ``--x=v`` is ``--x``) not in ``known``, up to ``--``."""
    words = [p.lstrip("[(").rstrip("]),;:.") for a in args[: args.index("--") if "--" in args else None]
             for p in a.split("|")]  # fmt: skip
    return [m.group(1) for w in words if (m := FLAG.fullmatch(w)) and m.group(1) not in known]


class Checker:
    """The parsers a command is checked against, built once; ``problem``: what is wrong with one command, or None."""

    def __init__(self, repo: Path):
        from sglang_overlay.cli import build_parser
        from sglang_overlay_gsm8k.cli import build_parser as gsm8k_parser

        self.repo, self.static, self.top = repo, _Static(repo / "scripts"), build_parser()
        self.subs = next(a for a in self.top._actions if isinstance(a, argparse._SubParsersAction)).choices
        self.gsm8k = set(gsm8k_parser()._option_string_actions)

    def check(self, path: str, text: str) -> list[Problem]:
        cmds, unbalanced = commands(path, text)
        return unbalanced + [Problem(c.path, c.line, c.text, msg) for c in cmds if (msg := self.problem(c))]

    def problem(self, cmd: Command) -> str | None:
        head, args, dynamic = cmd.tokens[0], list(cmd.tokens[1:]), []
        if cmd.kind == "nox":
            return self.nox(args)
        if cmd.kind == "script":
            if not (path := self.repo / head).is_file():
                return f"no such script {head}"
            known, dynamic = self.script_flags(path)
        elif FLAG.fullmatch(head):
            known, args, head = set(self.top._option_string_actions), [head, *args], "sglang-overlay"
        elif head == "launch" or not re.fullmatch(r"[a-z][a-z0-9-]*", head) or head not in self.subs and cmd.lang not in SHELL:  # fmt: skip
            return None  # launch: every argument is SGLang's launcher's (the overlay takes none); a placeholder; output
        elif head not in self.subs:
            return f"unknown subcommand {head!r}; sglang-overlay has: {', '.join(self.subs)}"
        else:
            known = self.gsm8k if head == "gsm8k" else set(self.subs[head]._option_string_actions)
            head = f"sglang-overlay {head}"
        if not (bad := _unknown(args, known)):
            return None
        unread = f" (names computed at {', '.join(dynamic)} are not read)" if dynamic else ""
        return f"unknown flag {', '.join(bad)} for {head}; it has: {', '.join(sorted(known))}{unread}"

    def script_flags(self, path: Path) -> tuple[set[str], list[str]]:
        if path.suffix == ".sh":
            return _shell_flags(path.read_text(encoding="utf-8")), []
        if any(getattr(n, "module", "") == "sglang_overlay_gsm8k.cli" for n in self.static.tree(path).body):
            return self.gsm8k, []  # the GSM8K runner under another name
        self.static.visit(path, self.static.tree(path).body, self.static.globals(path), out := ({"-h", "--help"}, []), ())  # fmt: skip
        return out

    def nox(self, args: list[str]) -> str | None:
        """Each ``-s NAME`` or ``-s "NAME(param='v')"`` is a session of noxfile.py (its parameters' values: any)."""
        sessions, args = {}, args[: args.index("--") if "--" in args else None]
        for fn in ast.parse((self.repo / "noxfile.py").read_text(encoding="utf-8")).body:
            decos = {ast.unparse(getattr(d, "func", d)): d for d in getattr(fn, "decorator_list", ())}
            if "nox.session" in decos:
                kw, par = {k.arg: k.value for k in getattr(decos["nox.session"], "keywords", ())}, decos.get("nox.parametrize")  # fmt: skip
                sessions[kw["name"].value if "name" in kw else fn.name] = {k.strip() for k in par.args[0].value.split(",")} if par else set()  # fmt: skip
        wanted = [w for i, a in enumerate(args) if a in ("-s", "-e", "--session", "--sessions")
                  for w in itertools.takewhile(lambda w: not w.startswith("-"), args[i + 1 :])]  # fmt: skip
        for spec in (s.replace(" ", "") for w in wanted for s in w.split(",")):
            name, _, params = spec.partition("(")
            if name not in sessions or not set(re.findall(r"(\w+)=", params)) <= sessions[name]:
                has = ", ".join(f"{n}({', '.join(sorted(p))})" if p else n for n, p in sessions.items())
                return f"no nox session {spec!r} in noxfile.py; it has: {has}"
        return None


def check_repo(repo: Path) -> list[Problem]:
    """Every command in README.md, the pages under docs/ and what they include (a ``--8<-- "path"`` line)."""
    checker, problems, docs = Checker(repo), [], [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    for doc in docs:  # grows while it is read: the included files come last
        rel, text = str(doc.relative_to(repo)), doc.read_text(encoding="utf-8")
        included = re.findall(r'^--8<--\s+"([^"]+)"\s*$', text, re.M)
        problems += [Problem(rel, 0, f'--8<-- "{m}"', "no such file to include") for m in included if not (repo / m).is_file()]  # fmt: skip
        docs += [repo / m for m in included if (repo / m).is_file() and repo / m not in docs]
        problems += checker.check(rel, text)
    return problems


def two_commands(readme: str, ci: str, path: str = "README.md") -> list[Problem]:
    """The ```bash block under the heading saying "two commands": two commands, lines ``.ci/run`` runs, in order."""
    lines = readme.splitlines()
    head = next((i for i, t in enumerate(lines) if re.match(r"#{1,6}\s.*two commands", t, re.I)), None)
    start = next((j for j in range(head + 1, len(lines)) if re.match(r"```bash\s*$|#{1,6}\s", lines[j])), None) if head is not None else None  # fmt: skip
    if start is None or lines[start].startswith("#"):
        return [Problem(path, 0, "", 'the README must keep a section headed "... two commands" with its ```bash block')]
    end = next((j for j in range(start + 1, len(lines)) if lines[j].strip().startswith("```")), len(lines))
    cmds = [(no + start, w) for no, t, _ in _snippets("\n".join(lines[start : end + 1])) if (w := _split(t)[0])]
    ran = [w[1:] if w[:1] == ["timed"] else w for w in (_split(t)[0] for t in ci.splitlines())]
    problems = [Problem(path, head + 1, lines[head], f"{len(cmds)} commands under it, not two")] * (len(cmds) != 2)
    problems += [Problem(path, no, " ".join(w), ".ci/run does not run this command") for no, w in cmds if w not in ran]
    if not problems and ran.index(cmds[0][1]) > ran.index(cmds[1][1]):
        problems.append(Problem(path, cmds[1][0], " ".join(cmds[1][1]), ".ci/run runs it before the set-up"))
    return problems
