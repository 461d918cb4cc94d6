"""The GSM8K runner's CLI as its tests drive it in-process: offline on a data folder, fast retries, and the
run's two files read back.

Invariant: ``run_cli`` never downloads and never draws a progress bar. Cost: one ``main()`` call.
"""

import json

from sglang_overlay_gsm8k.cli import main
from tests.support.env import GSM8K_DIR

MAX_RETRIES = 3


def run_cli(capsys, out_dir, *args, data_dir=GSM8K_DIR):
    argv = [
        "--data-dir",
        str(data_dir),
        "--no-download",
        "--no-progress",
        "--retry-backoff",
        "0.02",
        "--max-retries",
        str(MAX_RETRIES),
        *map(str, args),
    ]
    if out_dir is not None:
        argv += ["--output", str(out_dir)]
    code = main(argv)
    printed = capsys.readouterr().out.strip().splitlines()
    return code, printed[-1] if printed else ""


def load_run(out_dir):
    summary = json.loads((out_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    return summary, records
