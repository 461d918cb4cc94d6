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
import asyncio
import dataclasses
import hashlib
import os
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from sglang_overlay.version import __version__
from sglang_overlay_gsm8k import data, extra, journal, paired, prompts, report

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


def _progress(total: int, disable: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="gsm8k", unit="q", disable=disable, dynamic_ncols=True, file=sys.stderr)


def _body_maker(args: argparse.Namespace, shots, by_index: dict):
    """The request body of question ``i`` for the chosen mode (the few-shot prefix built once)."""
    if args.mode == "completions":
        prefix = prompts.few_shot_prefix(shots)
        return lambda i: {"prompt": prompts.completion_prompt(prefix, by_index[i])}
    return lambda i: {"messages": prompts.chat_messages(shots, by_index[i], args.system_prompt)}


def _run_config(args: argparse.Namespace, cfg, dataset, ids: list[int], selection: str) -> dict:
    """What summary.json records about the run, so baselines compare like with like."""
    from sglang_overlay_gsm8k.client import api_root

    return {
        "base_url": api_root(cfg.base_url),
        "model": cfg.model,
        "mode": args.mode,
        "stream": args.stream,
        "num_shots": args.num_shots,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "seed": args.seed,
        "parallel": args.parallel,
        "timeout_s": args.timeout,
        "max_retries": args.max_retries,
        "selection": selection,
        "question_set": hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16],
        "data_dir": str(dataset.directory),
        "data_sha256": dataset.test_sha256,
        "data_source": dataset.source,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "runner": f"sglang-overlay {__version__}",
    }


def _ask_all(cfgs: list, body_for, ids: list[int], by_index: dict, no_progress: bool, log: journal.Journal):
    """Ask every question of every server in ``cfgs`` (A, then B when paired), all servers at once and each in
    question order, so load and time fall on them alike; Ctrl-C keeps the answers so far and records the rest
    as interrupted. Returns (one record list per server, in ``ids`` order; wall seconds; interrupted)."""
    from sglang_overlay_gsm8k.client import Outcome, Runner

    records: list[dict[int, report.Record]] = [{} for _ in cfgs]
    bar = _progress(len(ids) * len(cfgs), no_progress)
    tally = {"correct": 0, "errors": 0, "done": 0}

    def on_done(side: int):
        def done(out: Outcome) -> None:
            rec = report.score(by_index[out.index], out)
            records[side][out.index] = rec
            log.append(side, rec)
            tally["correct"] += rec.correct
            tally["errors"] += rec.error is not None
            tally["done"] += 1
            bar.update(1)
            bar.set_postfix(acc=f"{tally['correct'] / tally['done']:.3f}", errors=tally["errors"], refresh=False)

        return done

    async def everything():
        await asyncio.gather(*(Runner(cfg, body_for).run(ids, on_done(side)) for side, cfg in enumerate(cfgs)))

    t0 = time.perf_counter()
    interrupted = False
    try:
        asyncio.run(everything())
    except KeyboardInterrupt:  # keep what was answered; the rest is recorded, not dropped
        interrupted = True
    finally:
        bar.close()
    wall = time.perf_counter() - t0
    for side in records:
        for i in ids:
            if i not in side:
                side[i] = report.score(
                    by_index[i],
                    Outcome(i, error="interrupted", error_message="run interrupted (Ctrl-C) before an answer"),
                )
    return [[side[i] for i in ids] for side in records], wall, interrupted


def run(args: argparse.Namespace, log: journal.Journal) -> tuple[dict, list[report.Record], dict | None]:
    """Load, run, score, each answer into ``log`` as it comes; returns (summary, records, baseline).
    Raises ValueError/DataError/RunnerError."""
    from sglang_overlay_gsm8k.client import ClientConfig, discover_model

    baseline = report.load_baseline(args.baseline) if args.baseline else None
    dataset = data.load(args.data_dir, allow_download=not args.no_download)
    test, train = dataset.test, dataset.train
    if dataset.source == data.FIXTURE:
        print(
            f"note: {dataset.directory} is sglang-overlay's test fixture ({len(test)} of the "
            f"{data.TEST_SIZE} test questions), not the full GSM8K",
            file=sys.stderr,
            flush=True,
        )
    sample_seed = args.seed if args.seed is not None else 0
    chosen = data.select(test, args.num_questions, args.sample, sample_seed)
    if args.num_shots > len(train):
        raise ValueError(f"--num-shots {args.num_shots}: the train split has {len(train)}")
    by_index = {p.index: p for p in chosen}
    cfg = ClientConfig(
        base_url=args.base_url,
        mode=args.mode,
        api_key=args.api_key or os.environ.get("OPENAI_API_KEY"),
        model=args.model,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        stop=prompts.STOP,
        stream=args.stream,
        parallel=args.parallel,
        timeout_s=args.timeout,
        max_retries=args.max_retries,
        backoff_s=args.retry_backoff,
        give_up_after=args.give_up_after,
    )
    cfgs = [cfg] + ([dataclasses.replace(cfg, base_url=args.against)] if args.against else [])
    for side in cfgs:
        if not side.model:
            side.model = asyncio.run(discover_model(side))
    ids = [p.index for p in chosen]
    selection = f"sample of {args.sample} (seed {sample_seed})" if args.sample is not None else f"first {len(chosen)}"
    configs = [_run_config(args, side, dataset, ids, selection) for side in cfgs]
    saved = paired.load_saved(args.paired_with, configs[0]) if args.paired_with else None
    log.start(configs, len(ids), time.perf_counter())
    try:
        runs, wall, interrupted = _ask_all(
            cfgs, _body_maker(args, train[: args.num_shots], by_index), ids, by_index, args.no_progress, log
        )
    finally:
        log.close()
    summary = report.summarize(runs[0], wall, configs[0])
    summary["interrupted"] = interrupted
    if len(runs) == 2:
        b_summary, b_records = report.summarize(runs[1], wall, configs[1]), runs[1]
        b_summary["interrupted"] = interrupted
    elif saved is not None:
        b_summary, b_records = saved
        b_summary["source"] = str(Path(args.paired_with).resolve())
    else:
        return summary, runs[0], baseline
    summary["b"] = {k: v for k, v in b_summary.items() if k not in ("b", "paired")}
    summary["paired"] = paired.pair(runs[0], b_records)
    summary["_b_records"] = b_records  # written to results_b.jsonl, dropped from summary.json
    return summary, runs[0], baseline


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
        summary, records, baseline = run(args, log)
        return _finish(args, console, summary, records, baseline)
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


def _finish(args: argparse.Namespace, console, summary: dict, records: list, baseline: dict | None) -> int:
    """The verdict of a finished run: tables, files, the reason printed last; returns the exit code."""
    b_records = summary.pop("_b_records", None)
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
    report.print_table(summary, console)
    if "paired" in summary:
        paired.print_table(summary["paired"], console)
    if args.output:
        written = journal.write_outputs(Path(args.output), summary, records, baseline, reason, b_records)
        console.print(f"wrote {', '.join(p.name for p in written)} to {args.output}")
    print(reason, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
