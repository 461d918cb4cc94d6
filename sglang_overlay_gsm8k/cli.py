"""GSM8K accuracy through an OpenAI-compatible API, with a verdict: ``sglang-overlay gsm8k``.

Runs the few-shot GSM8K check (the "Question: ...\\nAnswer: ..." format SGLang's own
check uses; shots from the train split) against ``--base-url``, as completions or
chat, ``--parallel`` requests at a time with retries, then prints a summary table,
writes per-question JSONL, a summary JSON, a Markdown report and two PNGs under
``--output``, and gates on ``--baseline`` / ``--min-accuracy``. With ``--against URL``
(a second server, asked the same questions at the same time) or ``--paired-with DIR``
(a saved run of the same questions) it adds the paired verdict (``paired.py``).

Exit codes: 0 pass; 1 accuracy below ``--min-accuracy`` or more than
``--tolerance`` under the baseline, or (paired) B worse than A at ``--alpha`` or more
answers changed than ``--max-flips``; 2 the run could not complete (more than
``--max-error-rate`` of the questions failed, no server, no data, bad arguments,
the ``gsm8k`` extra not installed). The reason is the last line printed.

Invariants: every selected question ends as exactly one record (answered, failed,
skipped or interrupted); nothing is sent before the arguments, the data and the
output directory have been checked. Importing this module needs only the standard
library and rich (a core dependency); the extra's packages (httpx, tqdm,
matplotlib) are checked when ``main`` runs and imported where used.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from sglang_overlay_gsm8k import data, extra, journal, paired, render, report, session

DEFAULT_BASE_URL = "http://127.0.0.1:30000"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sglang-overlay gsm8k",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("server")
    g.add_argument("--base-url", default=DEFAULT_BASE_URL, help="OpenAI-compatible server (with or without /v1)")
    g.add_argument("--api-key", help="bearer token (default: $OPENAI_API_KEY when set)")
    g.add_argument("--model", help="model id (default: the first id /v1/models lists)")
    g = p.add_argument_group("prompting and sampling")
    g.add_argument("--mode", choices=("completions", "chat"), default="completions")
    g.add_argument("--num-shots", type=int, default=5, help="worked examples from the train split")
    g.add_argument("--system-prompt", help="chat mode: a system message before the shots")
    g.add_argument("--max-tokens", type=int, default=512)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--seed", type=int, help="request seed, and the --sample draw (default 0 there)")
    g.add_argument("--stream", action="store_true", help="stream responses (SSE); measures time to first token")
    g = p.add_argument_group("questions")
    q = g.add_mutually_exclusive_group()
    q.add_argument("--num-questions", type=int, help="the first N of the 1,319 test questions (default: all)")
    q.add_argument("--sample", type=int, metavar="N", help="N test questions drawn with --seed")
    g.add_argument(
        "--data-dir",
        help="directory with test.jsonl and train.jsonl "
        f"(else ${data.ENV_DIR}, else {data.cache_dir()}, else a download)",
    )
    g.add_argument("--no-download", action="store_true", help="never fetch the dataset")
    g = p.add_argument_group("load and failures")
    g.add_argument("--parallel", type=int, default=64, help="concurrent requests")
    g.add_argument("--timeout", type=float, default=600.0, help="per-request deadline, seconds")
    g.add_argument("--max-retries", type=int, default=3, help="retries on 429/5xx/timeouts/connection errors")
    g.add_argument("--retry-backoff", type=float, default=0.5, help="first backoff, seconds (doubles, jittered)")
    g.add_argument(
        "--give-up-after",
        type=int,
        default=20,
        help="after this many consecutive failed questions, skip the rest (0: never)",
    )
    g.add_argument(
        "--max-error-rate",
        type=float,
        default=0.05,
        help="a run with more failed questions than this fraction is incomplete (exit 2)",
    )
    g = p.add_argument_group("paired A/B (A: --base-url; B: --against or a saved run)")
    ab = g.add_mutually_exclusive_group()
    ab.add_argument("--against", metavar="URL", help="B: a second server asked the same questions at the same time")
    ab.add_argument(
        "--paired-with",
        metavar="DIR",
        help="B: a saved run (--output DIR of an earlier run) of the same questions and data",
    )
    g.add_argument("--alpha", type=float, default=0.05, help="fail when B is worse than A at this McNemar p-value")
    g.add_argument(
        "--max-flips",
        type=int,
        metavar="N",
        help="fail when more than N questions' answers changed (0: identical answers expected)",
    )
    g = p.add_argument_group("output and gating")
    g.add_argument("--output", metavar="DIR", help="write results.jsonl, summary.json, report.md, *.png here")
    g.add_argument("--baseline", metavar="FILE", help="a previous summary.json to compare with")
    g.add_argument("--tolerance", type=float, default=0.02, help="allowed absolute accuracy drop vs --baseline")
    g.add_argument("--min-accuracy", type=float, help="fail below this accuracy")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _check_args(args: argparse.Namespace) -> None:
    checks = [
        (args.num_shots >= 0, "--num-shots must be >= 0"),
        (args.max_tokens >= 1, "--max-tokens must be >= 1"),
        (args.parallel >= 1, "--parallel must be >= 1"),
        (args.timeout > 0, "--timeout must be > 0"),
        (args.max_retries >= 0, "--max-retries must be >= 0"),
        (args.retry_backoff >= 0, "--retry-backoff must be >= 0"),
        (args.give_up_after >= 0, "--give-up-after must be >= 0"),
        (0 <= args.max_error_rate <= 1, "--max-error-rate must be in [0, 1]"),
        (args.tolerance >= 0, "--tolerance must be >= 0"),
        (args.min_accuracy is None or 0 <= args.min_accuracy <= 1, "--min-accuracy must be in [0, 1]"),
        (args.temperature >= 0, "--temperature must be >= 0"),
        (args.system_prompt is None or args.mode == "chat", "--system-prompt needs --mode chat"),
        (0 < args.alpha < 1, "--alpha must be in (0, 1)"),
        (args.max_flips is None or args.max_flips >= 0, "--max-flips must be >= 0"),
        (args.max_flips is None or args.against or args.paired_with, "--max-flips needs --against or --paired-with"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    console = Console(soft_wrap=True)
    parser = build_parser()
    args = parser.parse_args(argv)
    failed = extra.missing()
    if failed:
        print(extra.advice(failed), flush=True)
        return report.INCOMPLETE
    from sglang_overlay_gsm8k.client import RunnerError

    log = journal.Journal(Path(args.output) if args.output else None)
    try:
        _check_args(args)
        if args.output:  # find an unwritable --output now, not after an hour of requests
            try:
                Path(args.output).mkdir(parents=True, exist_ok=True)
                (Path(args.output) / ".write-test").touch()
                (Path(args.output) / ".write-test").unlink()
            except OSError as exc:
                raise ValueError(f"--output {args.output}: not a writable directory ({exc})") from exc
        return _finish(args, console, session.run(args, log))
    except (ValueError, data.DataError, RunnerError) as exc:  # paired.PairingError is a ValueError
        print(f"sglang-overlay gsm8k: {exc}", flush=True)
        return report.INCOMPLETE
    except (Exception, KeyboardInterrupt) as exc:  # a bug or a late Ctrl-C is exit 2 with its reason, never 1
        if isinstance(exc, KeyboardInterrupt):
            reason = "INCOMPLETE: interrupted (Ctrl-C) outside the questions; no verdict"
        else:
            traceback.print_exc(file=sys.stderr)
            reason = f"INCOMPLETE: internal error in the runner: {type(exc).__name__}: {exc}"
        kept = log.crashed(reason, time.perf_counter())
        if kept is not None:
            reason += f"; answers so far and an incomplete summary are in {args.output}"
        print(reason, flush=True)
        return report.INCOMPLETE


def _finish(args: argparse.Namespace, console, done: session.Run) -> int:
    """The verdict of a finished run: tables, files, the reason printed last; returns the exit code."""
    summary, records, baseline = done.summary, done.records, done.baseline
    code, reason = report.verdict(
        summary,
        baseline=baseline,
        tolerance=args.tolerance,
        min_accuracy=args.min_accuracy,
        max_error_rate=args.max_error_rate,
    )
    if "paired" in summary:
        b_code, _ = report.verdict(summary["b"], max_error_rate=args.max_error_rate)
        paired_code, paired_reason = paired.verdict(summary["paired"], code, b_code, args.alpha, args.max_flips)
        a_failed = code == report.REGRESSION and paired_code != report.INCOMPLETE
        code, reason = max(code, paired_code), paired_reason + (f"; A alone: {reason}" if a_failed else "")
    summary["incomplete"] = code == report.INCOMPLETE
    summary["verdict"] = {"exit_code": code, "reason": reason}
    render.print_table(summary, console)
    if "paired" in summary:
        paired.print_table(summary["paired"], console)
    if args.output:
        written = journal.write_outputs(Path(args.output), summary, records, baseline, reason, done.b_records)
        console.print(f"wrote {', '.join(p.name for p in written)} to {args.output}")
    print(reason, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
