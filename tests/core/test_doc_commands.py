"""The commands the README and the docs show exist as shown (``tests/support/doc_commands.py``): the extractor on
small texts, the static reading of scripts' flags on a scratch ``scripts/``, then the repository's own README,
docs and ``.ci/run``.

Invariant: in-process, no subprocess, no sglang; a stale command fails with its file, line and what is wrong.
Cost: the overlay's and the GSM8K runner's parsers and an ``ast`` parse of each script named: well under a second.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.support.doc_commands import Checker, check_repo, commands, two_commands
from tests.support.env import REPO

FENCE = "```"


def _md(text: str) -> str:
    return textwrap.dedent(text).replace("'''", FENCE)


def _tokens(text: str, lang_too: bool = False) -> list:
    return [(c.line, c.kind, c.tokens) + ((c.lang,) if lang_too else ()) for c in commands("x.md", _md(text))[0]]


@pytest.fixture(scope="module")
def checker() -> Checker:
    return Checker(REPO)


@pytest.fixture
def scratch(tmp_path):
    """A repository with a script whose flags come from a helper module, a loop and a parameter; a shell script."""
    (tmp_path / "scripts" / "pkg").mkdir(parents=True)
    (tmp_path / "scripts" / "common.py").write_text(
        _md("""
        def add_output(parser, png="a chart"):
            parser.add_argument("--json")
            if png is not None:
                parser.add_argument("--png")
        """)
    )
    (tmp_path / "scripts" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "scripts" / "pkg" / "cli.py").write_text(
        _md("""
        import argparse
        from common import add_output

        NAMES = ("--alpha", "--beta")

        def parse(argv=None, per_tree="--loads", png="x"):
            ap = argparse.ArgumentParser()
            add_output(ap, png=png)
            ap.add_argument(per_tree, type=int)
            for name in NAMES:
                ap.add_argument(name)
            for name in ("--gamma", "-g"):
                ap.add_argument(name)
            return ap.parse_args(argv)
        """)
    )
    (tmp_path / "scripts" / "tool.py").write_text(
        _md("""
        import sys
        from pkg.cli import parse

        def main(argv=None):
            return parse(argv, per_tree="--calls", png=None)

        if __name__ == "__main__":
            sys.exit(main())
        """)
    )
    (tmp_path / "scripts" / "tool2.py").write_text("import pkg.cli as c\n\nc.parse(per_tree=FLAG)\n")
    (tmp_path / "scripts" / "run.sh").write_text(
        _md("""
        [ "${1:-}" = "--device" ] && DEVICE="$2"
        while [ $# -gt 0 ]; do
          case "$1" in
            --gpu) MODE=gpu ;;
            --venv) VENV="$2"; shift ;;
            -h|--help) usage ;;
            *) exit 2 ;;
          esac
        done
        """)
    )
    (tmp_path / "noxfile.py").write_text(
        _md("""
        import nox

        @nox.session
        def lint(session): ...

        @nox.session(name="docs-site")
        def docs(session): ...

        @nox.session
        @nox.parametrize("pin", PINS)
        def tiers(session, pin): ...
        """)
    )
    return Checker(tmp_path)


def test_a_fenced_block_an_indented_block_and_an_inline_span():
    text = """
        Run `sglang-overlay check --needed` first.

        '''bash
        sglang-overlay status --url http://h:1   # a comment: --not-a-flag
        '''

            scripts/demo.py --model tiny
        """
    assert _tokens(text) == [
        (5, "overlay", ("status", "--url", "http://h:1")),
        (8, "script", ("scripts/demo.py", "--model", "tiny")),
        (2, "overlay", ("check", "--needed")),
    ]


def test_continuations_prefixes_and_shell_operators():
    text = """
        '''bash
        FOO=1 .venv/bin/python scripts/x.py --a \\
            --b 2 | tee log && .venv-0.5.22/bin/sglang-overlay lock --check > out.txt
        $ python3 -m sglang_overlay check; bash scripts/y.sh --gpu 2>&1 &
        .venv/bin/nox -s "tiers(pin='0.5.23')" -- --fresh
        '''
        '''dockerfile
        FROM image
        RUN pip install x \\
         && sglang-overlay check
        '''
        """
    assert _tokens(text) == [
        (3, "script", ("scripts/x.py", "--a", "--b", "2")),
        (3, "overlay", ("lock", "--check")),
        (5, "overlay", ("check",)),
        (5, "script", ("scripts/y.sh", "--gpu")),
        (6, "nox", ("nox", "-s", "tiers(pin='0.5.23')", "--", "--fresh")),
        (10, "overlay", ("check",)),
    ]


def test_an_unbalanced_quote_is_reported_not_fatal(checker):
    problems = checker.check(
        "x.md",
        _md("""
        '''bash
        sglang-overlay check --json "unclosed
        '''
        """),
    )
    assert [p.message for p in problems] == ["unbalanced quotes: checked word by word"]
    assert problems[0].line == 3 and "unclosed" in problems[0].command


def test_an_unknown_flag_and_subcommand_are_reported_with_what_exists(checker):
    problems = checker.check("x.md", "`sglang-overlay check --nope` and `sglang-overlay frobnicate --x`")
    assert [str(p) for p in problems] == [
        "x.md:1: `sglang-overlay check --nope`: unknown flag --nope for sglang-overlay check; it has: "
        "--help, --json, --needed, -h",
        "x.md:1: `sglang-overlay frobnicate --x`: unknown subcommand 'frobnicate'; sglang-overlay has: "
        "check, lock, rebase-check, status, process-hook, launch, gsm8k",
    ]


def test_placeholders_pass_and_flags_after_them_are_still_checked(checker):
    fine = [
        "sglang-overlay rebase-check --to VERSION",
        "sglang-overlay rebase-check [--wheel FILE | --to=0.5.21]",
        "sglang-overlay status --url URL [--json] [--api-key KEY|--http]",
        "sglang-overlay launch --model-path <model> --tp 8 --anything ...",  # SGLang's flags: not the overlay's
        "sglang-overlay gsm8k --base-url ... --num-questions 50 --output runs/x",  # the runner's own parser
        "sglang-overlay --version",
        "sglang-overlay COMMAND --help",
    ]
    assert checker.check("x.md", " ".join(f"`{c}`" for c in fine)) == []
    (problem,) = checker.check("x.md", "`sglang-overlay gsm8k --base-url ... --num-question 5`")
    assert problem.message.startswith("unknown flag --num-question for sglang-overlay gsm8k; it has: ")


def test_output_in_a_text_block_is_not_a_command(checker):
    text = _md("""
        '''
        sglang-overlay refused to start: patch 'x' target y: fingerprint drift
        sglang-overlay check --bogus
        '''
        """)
    assert [p.message.split(";")[0] for p in checker.check("x.md", text)] == [
        "unknown flag --bogus for sglang-overlay check"
    ]


def test_a_script_missing_or_with_an_unknown_flag_is_reported(scratch):
    text = "`scripts/gone.py --x` `scripts/tool.py --calls 3 --json F --png F` `scripts/run.sh --gpu --cpu`"
    assert [(p.command, p.message.split(";")[0]) for p in scratch.check("x.md", text)] == [
        ("scripts/gone.py --x", "no such script scripts/gone.py"),
        ("scripts/tool.py --calls 3 --json F --png F", "unknown flag --png for scripts/tool.py"),
        ("scripts/run.sh --gpu --cpu", "unknown flag --cpu for scripts/run.sh"),
    ]


def test_flags_are_read_through_helpers_loops_and_parameters(scratch):
    flags, unread = scratch.script_flags(scratch.repo / "scripts" / "tool.py")
    assert flags == {"-h", "--help", "--json", "--calls", "--alpha", "--beta", "--gamma", "-g"} and unread == []
    assert scratch.script_flags(scratch.repo / "scripts" / "run.sh")[0] == {
        "--device",
        "--gpu",
        "--venv",
        "-h",
        "--help",
    }
    (problem,) = scratch.check("x.md", "`python scripts/tool2.py --zeta`")
    assert problem.message.endswith("(names computed at scripts/pkg/cli.py:10 are not read)")


def test_nox_sessions_and_their_parameters(scratch):
    good = "`nox -s lint` `nox -s docs-site` `nox --no-color -s \"tiers(pin='9.9')\" -- --reuse` `nox -s tiers`"
    assert scratch.check("x.md", good) == []
    bad = scratch.check("x.md", "`nox -s docs` `nox -s \"tiers(python='3.12')\"`")
    assert [p.message for p in bad] == [
        "no nox session 'docs' in noxfile.py; it has: lint, docs-site, tiers(pin)",
        "no nox session \"tiers(python='3.12')\" in noxfile.py; it has: lint, docs-site, tiers(pin)",
    ]


def test_the_two_commands_against_ci():
    readme = _md("""
        ## Development: two commands

        '''bash
        scripts/apply_patches.sh          # builds .venv
        .venv/bin/python -m pytest
        '''
        """)
    ci = "set -e\ntimed scripts/apply_patches.sh\ntimed .venv/bin/python -m pytest\n"
    assert two_commands(readme, ci) == []
    assert [p.line for p in two_commands(readme, ci.replace(" -m pytest", " -m pytest -x"))] == [6]
    assert two_commands(readme, "timed .venv/bin/python -m pytest\nscripts/apply_patches.sh\n")[0].message == (
        ".ci/run runs it before the set-up"
    )
    assert "must keep a section" in two_commands("## Tests\n\n" + FENCE + "bash\nx\n" + FENCE + "\n", ci)[0].message


def test_every_script_s_flags_are_read_statically():
    static = Checker(REPO)
    unread = {p.name: static.script_flags(p)[1] for p in sorted((REPO / "scripts").glob("*.py"))}
    assert not {name: calls for name, calls in unread.items() if calls}
    assert {"--calls", "--json", "--quick"} <= static.script_flags(REPO / "scripts" / "bench_capacity.py")[0]
    assert "--png" not in static.script_flags(REPO / "scripts" / "bench_capacity.py")[0]  # png=None


def test_the_readme_and_the_docs_show_only_commands_that_exist():
    problems = check_repo(REPO)
    assert not problems, "stale commands in the README or the docs:\n" + "\n".join(map(str, problems))


def test_the_readme_s_two_commands_are_the_ones_ci_runs():
    readme, ci = (REPO / "README.md").read_text(encoding="utf-8"), (REPO / ".ci" / "run").read_text(encoding="utf-8")
    problems = two_commands(readme, ci)
    assert not problems, "\n".join(map(str, problems))
