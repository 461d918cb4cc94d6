"""One GSM8K run: load the questions, ask every server at once, score each answer as it comes.

``run(args, log)`` returns a :class:`Run`: A's summary and records, the baseline, and B's records where the
run is paired (``--against`` asked at the same time, or ``--paired-with`` a saved run); ``cli`` gives the
verdict and writes the files. Invariant: every selected question ends as exactly one record per server
(answered, failed, skipped or interrupted: Ctrl-C keeps the answers so far). Cost: the requests themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sglang_overlay.version import __version__
from sglang_overlay_gsm8k import data, journal, paired, prompts, report


@dataclass
class Run:
    summary: dict  # A's summary (with "b" and "paired" where the run is paired)
    records: list  # A's records, in question order
    baseline: dict | None
    b_records: list | None = None  # B's records (results_b.jsonl), where paired


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


def run(args: argparse.Namespace, log: journal.Journal) -> Run:
    """Load, run, score, each answer into ``log`` as it comes. Raises ValueError/DataError/RunnerError."""
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
        return Run(summary, runs[0], baseline)
    summary["b"] = {k: v for k, v in b_summary.items() if k not in ("b", "paired")}
    summary["paired"] = paired.pair(runs[0], b_records)
    return Run(summary, runs[0], baseline, b_records)
