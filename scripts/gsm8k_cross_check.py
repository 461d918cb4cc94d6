#!/usr/bin/env python
"""Cross-check: our GSM8K runner against upstream's ``sglang.test.run_eval --eval-name gsm8k``, on one server.

Both runners ask the same server the same questions with the same few-shot prompt, greedy, one request at a time
by default (greedy text depends on the batch a request is decoded in), and their verdicts are compared:

- accuracy of each, with its 95% Wilson interval, and whether each accuracy lies inside the other's interval
  (the goal);
- per question: the same output text or not, the same extracted answer or not (each runner's extraction on its
  own text), the same correct/wrong verdict or not; and every disagreement with its reason (different text, or
  the same text read differently by the two extractors).

Upstream's side is upstream's own code: ``run_eval.run_eval_once`` with ``GSM8KEval`` and the completions sampler,
exactly what ``python -m sglang.test.run_eval --eval-name gsm8k --api completion --gsm8k-data-path F
--num-examples N --num-shots K --max-tokens M --num-threads P`` runs (the CLI prints only the score; calling
the same function keeps each question's text). ``F`` is a file this script writes: our ``K`` shots (the first
``K`` of the train split) followed by our ``N`` questions (the first ``N`` of the test split), since upstream
takes its shots from the first lines of its file. Our side is ``python -m sglang_overlay gsm8k``, in its own
process, as an operator runs it. The two prompts are checked equal before anything is sent.

Known differences, by design of each runner (also in docs/evidence/gsm8k.md):

- stop sequences: upstream ``["Question", "Assistant:", "<|separator|>"]``, ours ``["Question:", ...]``;
- extraction: upstream takes the last number of the text; ours takes ``#### N``, then "the answer is N", then
  the last number, and reads thousands commas, currency signs and Unicode minus signs;
- a failed request: upstream scores it as a wrong answer (its sampler returns ""), ours records it as an
  error, apart from wrong answers.

    .venv/bin/python scripts/gsm8k_cross_check.py --base-url http://127.0.0.1:30000 --num-questions 200 \\
        --data-dir ../shared/data/gsm8k --json out/gsm8k_cross_check.json

Exit 0 when each accuracy is inside the other's interval, 1 when not, 2 on bad input or an unreachable server.
Files are written only where told (``--json``, ``--keep-output``). Cost: the requests, twice.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from decimal import Decimal, InvalidOperation
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_common import wilson, write_json  # noqa: E402

UPSTREAM_CLI = "python -m sglang.test.run_eval --eval-name gsm8k --api completion"


class CrossCheckError(RuntimeError):
    """The cross-check cannot run: our runner failed, or the two prompts differ (nothing compared)."""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", required=True, help="the server both runners ask (with or without /v1)")
    p.add_argument("--data-dir", help="GSM8K splits (test.jsonl, train.jsonl; default: as the runner finds them)")
    p.add_argument("--num-questions", type=int, default=20, help="the first N test questions (default 20)")
    p.add_argument("--num-shots", type=int, default=5, help="worked examples, the first K of the train split")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--parallel", type=int, default=1, help="requests in flight, each runner (default 1: greedy)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the figures and every question's row to FILE")
    p.add_argument("--keep-output", type=Path, metavar="DIR", help="keep both runners' files in DIR")
    args = p.parse_args(argv)
    for name in ("num_questions", "num_shots", "max_tokens", "parallel"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    args.base_url = args.base_url.rstrip("/").removesuffix("/v1")
    return args


def upstream_file(shots, questions, path: Path) -> Path:
    """Upstream's GSM8KEval reads its shots from the first lines of its file: ours, then our questions."""
    with open(path, "w", encoding="utf-8") as fh:
        for p in list(shots) + list(questions):
            fh.write(json.dumps({"question": p.question, "answer": p.answer}, ensure_ascii=False) + "\n")
    return path


def check_same_prompts(shots, questions, eval_obj) -> None:
    """Our completion prompt and upstream's, question by question: they must be the same string."""
    from sglang.test.simple_eval_mixed_prefix_gsm8k import get_one_example

    from sglang_overlay_gsm8k import prompts

    prefix = prompts.few_shot_prefix(shots)
    for i, q in enumerate(questions):
        theirs = eval_obj._build_prefix(i) + get_one_example(eval_obj._lines, i, include_answer=False)
        if theirs != prompts.completion_prompt(prefix, q):
            raise CrossCheckError(f"the two runners' prompts differ at test question {q.index}; nothing was sent")


def run_upstream(args, data_path: Path, shots, questions) -> tuple[list[dict], dict]:
    """Upstream's ``run_eval_once`` with ``GSM8KEval``: one row per question, in question order."""
    from sglang.test.run_eval import run_eval_once
    from sglang.test.simple_eval_mixed_prefix_gsm8k import GSM8KEval, get_answer_value

    eval_obj = GSM8KEval(len(questions), args.parallel, args.num_shots, str(data_path))
    check_same_prompts(shots, questions, eval_obj)
    ns = argparse.Namespace(api="completion", max_tokens=args.max_tokens, temperature=0.0, top_p=1.0, model=None)
    os.environ.setdefault("OPENAI_API_KEY", "EMPTY")
    result, latency, _ = run_eval_once(ns, f"{args.base_url}/v1", eval_obj)
    rows = []
    for q, convo in zip(questions, result.convos, strict=True):
        text = convo[-1]["content"]
        got, gold = get_answer_value(text), get_answer_value(q.answer)
        rows.append({"id": q.index, "output": text, "answer": _number(got), "correct": got == gold})
    return rows, {"score": result.score, "wall_s": round(latency, 2)}


def run_ours(args, out_dir: Path) -> tuple[list[dict], dict]:
    """``python -m sglang_overlay gsm8k`` in its own process; its records, in question order."""
    cmd = [sys.executable, "-m", "sglang_overlay", "gsm8k", "--base-url", args.base_url, "--mode", "completions"]
    cmd += ["--num-questions", str(args.num_questions), "--num-shots", str(args.num_shots)]
    cmd += ["--max-tokens", str(args.max_tokens), "--parallel", str(args.parallel)]
    cmd += ["--output", str(out_dir), "--no-progress"] + (["--data-dir", args.data_dir] if args.data_dir else [])
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if done.returncode not in (0, 1):  # 1: a gate failed, which this run sets none of; 2: bad input or no server
        raise CrossCheckError(f"our runner exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}")
    records = [json.loads(line) for line in (out_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    summary = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    rows = [
        {"id": r["id"], "output": r["output"], "answer": _number(r["prediction"]), "correct": r["correct"],
         "extracted_by": r["extracted_by"], "error": r["error"]}
        for r in sorted(records, key=lambda r: r["id"])
    ]  # fmt: skip
    return rows, {"accuracy": summary["accuracy"], "wall_s": summary["wall_s"], "errors": summary["error_count"]}


def _number(value) -> str | None:
    """An extracted answer as a canonical decimal string (upstream's int/float or INVALID, our Decimal text)."""
    from sglang.test.simple_eval_mixed_prefix_gsm8k import INVALID

    if value is None or value == INVALID:
        return None
    try:
        return format(Decimal(str(value)).normalize(), "f")  # "30", never "3E+1"
    except InvalidOperation:
        return None


def compare(ours: list[dict], theirs: list[dict]) -> dict:
    """The figures of one cross-check: accuracies with their intervals, per-question agreement, disagreements."""
    assert [r["id"] for r in ours] == [r["id"] for r in theirs], "both runners must answer the same questions"
    n = len(ours)
    ok_ours, ok_theirs = sum(r["correct"] for r in ours), sum(r["correct"] for r in theirs)
    ci_ours, ci_theirs = wilson(ok_ours, n), wilson(ok_theirs, n)
    acc_ours, acc_theirs = ok_ours / n, ok_theirs / n
    disagreements = []
    for a, b in zip(ours, theirs):
        if a["answer"] != b["answer"] or a["correct"] != b["correct"]:
            why = "the same text, read differently" if a["output"] == b["output"] else "different output text"
            disagreements.append({"id": a["id"], "ours": a["answer"], "upstream": b["answer"], "why": why,
                                  "correct_ours": a["correct"], "correct_upstream": b["correct"]})  # fmt: skip
    return {
        "questions": n,
        "accuracy_ours": round(acc_ours, 4),
        "accuracy_upstream": round(acc_theirs, 4),
        "wilson95_ours": [round(x, 4) for x in ci_ours],
        "wilson95_upstream": [round(x, 4) for x in ci_theirs],
        "inside_each_other": ci_theirs[0] <= acc_ours <= ci_theirs[1] and ci_ours[0] <= acc_theirs <= ci_ours[1],
        "same_text": sum(a["output"] == b["output"] for a, b in zip(ours, theirs)),
        "same_answer": sum(a["answer"] == b["answer"] for a, b in zip(ours, theirs)),
        "same_verdict": sum(a["correct"] == b["correct"] for a, b in zip(ours, theirs)),
        "read_differently": sum(d["why"] == "the same text, read differently" for d in disagreements),
        "disagreements": disagreements,
    }


def print_table(fig: dict, say=print) -> None:
    n = fig["questions"]
    say(f"{'':<28}{'ours':>18}{'upstream run_eval':>20}")
    say(f"{'accuracy':<28}{fig['accuracy_ours']:>18.3f}{fig['accuracy_upstream']:>20.3f}")
    lo_o, hi_o = fig["wilson95_ours"]
    lo_u, hi_u = fig["wilson95_upstream"]
    say(f"{'95% Wilson interval':<28}{f'{lo_o:.3f}-{hi_o:.3f}':>18}{f'{lo_u:.3f}-{hi_u:.3f}':>20}")
    for key in ("same_text", "same_answer", "same_verdict"):
        say(f"{key.replace('_', ' ') + ' (per question)':<28}{fig[key]:>11} of {n}")
    for d in fig["disagreements"]:
        say(f"  test question {d['id']}: ours {d['ours']} ({'right' if d['correct_ours'] else 'wrong'}), upstream "
            f"{d['upstream']} ({'right' if d['correct_upstream'] else 'wrong'}): {d['why']}")  # fmt: skip
    verdict = "inside" if fig["inside_each_other"] else "NOT inside"
    say(f"verdict: each accuracy is {verdict} the other's 95% Wilson interval")


def main(argv=None) -> int:
    args = parse_args(argv)
    from sglang_overlay_gsm8k import data

    try:
        dataset = data.load(args.data_dir, allow_download=False)
        questions = data.select(dataset.test, args.num_questions)
    except (data.DataError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.num_shots > len(dataset.train):
        print(f"error: --num-shots {args.num_shots}: the train split has {len(dataset.train)}", file=sys.stderr)
        return 2
    shots = dataset.train[: args.num_shots]
    with tempfile.TemporaryDirectory(prefix="gsm8k-cross-") as tmp:
        out = args.keep_output or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        try:
            ours, ours_meta = run_ours(args, out / "ours")
            data_path = upstream_file(shots, questions, out / "upstream-gsm8k.jsonl")
            theirs, theirs_meta = run_upstream(args, data_path, shots, questions)
        except CrossCheckError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        (out / "upstream-rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in theirs), encoding="utf-8")
    fig = compare(ours, theirs)
    upstream_cmd = (f"{UPSTREAM_CLI} --gsm8k-data-path FILE --num-examples {args.num_questions} --num-shots "
                    f"{args.num_shots} --max-tokens {args.max_tokens} --num-threads {args.parallel}")  # fmt: skip
    result = {**fig, "ours": ours_meta, "upstream": {**theirs_meta, "command": upstream_cmd},
              "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "data_source": dataset.source, "rows": {"ours": ours, "upstream": theirs}}  # fmt: skip
    print_table(fig)
    if write_json(args.json, result):
        print(f"wrote {args.json}")
    return 0 if fig["inside_each_other"] else 1


if __name__ == "__main__":
    sys.exit(main())
