"""The GSM8K runner's command lines (sglang-overlay gsm8k, scripts/gsm8k_eval.py) and its refusals
before any request is sent: bad arguments, bad baseline, no data, no server (exit 2, reason last)."""

import json
import socket
import subprocess
import sys

import pytest

from sglang_overlay_gsm8k.cli import main
from tests.support.env import GSM8K_DIR, REPO, subprocess_env
from tests.support.proc import run_cli


def _last_line(capsys):
    return capsys.readouterr().out.strip().splitlines()[-1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_console_script_dispatches_to_the_runner(tmp_path):
    proc = run_cli("gsm8k", "--data-dir", str(tmp_path), "--no-download", timeout=120)
    assert proc.returncode == 2
    assert proc.stdout.strip().splitlines()[-1].startswith("sglang-overlay gsm8k: --data-dir")


def test_script_wrapper_help():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gsm8k_eval.py"), "--help"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert proc.returncode == 0
    for flag in (
        "--base-url",
        "--mode",
        "--num-questions",
        "--sample",
        "--parallel",
        "--baseline",
        "--tolerance",
        "--min-accuracy",
        "--output",
        "--data-dir",
        "--stream",
    ):
        assert flag in proc.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--parallel", "0"], "--parallel"),
        (["--max-error-rate", "1.5"], "--max-error-rate"),
        (["--system-prompt", "x"], "--mode chat"),
        (["--num-questions", "61"], "the test split has 60"),
        (["--num-shots", "8000"], "--num-shots"),
    ],
)
def test_bad_arguments_exit_2_before_any_request(capsys, args, needle):
    port = _closed_port()
    assert main(["--base-url", f"http://127.0.0.1:{port}", "--data-dir", str(GSM8K_DIR), *args]) == 2
    assert needle in _last_line(capsys)


def test_unwritable_output_is_refused_before_the_run(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    assert (
        main(
            [
                "--data-dir",
                str(GSM8K_DIR),
                "--output",
                str(tmp_path / "file" / "out"),
                "--base-url",
                "http://127.0.0.1:9",
            ]
        )
        == 2
    )
    assert "--output" in _last_line(capsys)


def test_bad_baseline_is_refused_before_the_run(capsys, tmp_path):
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps({"accuracy": "high"}))
    assert main(["--data-dir", str(GSM8K_DIR), "--baseline", str(bad), "--base-url", "http://127.0.0.1:9"]) == 2
    assert "--baseline" in _last_line(capsys)


def test_no_server_is_exit_2_with_advice(capsys):
    port = _closed_port()
    code = main(
        [
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--data-dir",
            str(GSM8K_DIR),
            "--max-retries",
            "1",
            "--retry-backoff",
            "0.01",
            "--num-questions",
            "5",
        ]
    )
    last = _last_line(capsys)
    assert code == 2 and "/v1/models" in last and "--base-url" in last


def test_no_server_with_a_model_named_fails_every_question(capsys, tmp_path):
    port = _closed_port()
    code = main(
        [
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--model",
            "m",
            "--data-dir",
            str(GSM8K_DIR),
            "--max-retries",
            "0",
            "--num-questions",
            "30",
            "--parallel",
            "2",
            "--give-up-after",
            "4",
            "--no-progress",
            "--output",
            str(tmp_path),
        ]
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == 2 and _last_line(capsys).startswith("INCOMPLETE")
    assert summary["error_count"] == 30 and set(summary["errors"]) == {"connection", "skipped"}
    assert summary["verdict"]["exit_code"] == 2
