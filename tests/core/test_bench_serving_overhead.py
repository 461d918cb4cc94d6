"""scripts/bench_serving_overhead.py without a server: the command it gives upstream's load generator parses in
upstream's own CLI, the ratios pair each launch with the right one, and a verdict is judged against the A/A
band in log terms (the servers themselves are the benchmark's; it is not a test tier)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_serving_overhead")


@pytest.fixture(scope="module")
def common():
    return load_script("bench_common")


def args(**over):
    base = dict(input_len=128, output_len=64, num_prompts=32, max_concurrency=8)
    return SimpleNamespace(**(base | over))


def test_the_command_parses_in_upstreams_own_cli_as_meant(bench, monkeypatch):
    import sglang.benchmark.serving as serving

    cmd = bench.bench_command("http://127.0.0.1:1", Path("/models/m"), args(), Path("/tmp/o.jsonl"), 5)
    assert cmd[1:3] == ["-m", "sglang.benchmark.serving"]
    seen = []
    monkeypatch.setattr(serving, "run_benchmark", seen.append)
    monkeypatch.setattr(sys, "argv", ["serving", *cmd[3:]])
    serving.cli_main()
    (parsed,) = seen
    assert (parsed.backend, parsed.dataset_name, parsed.base_url) == ("sglang-oai", "random-ids", "http://127.0.0.1:1")
    assert (parsed.random_input_len, parsed.random_output_len, parsed.random_range_ratio) == (128, 64, 1.0)
    assert (parsed.num_prompts, parsed.max_concurrency, parsed.seed, parsed.warmup_requests) == (32, 8, 5, 8)
    assert parsed.request_rate == math.inf and parsed.flush_cache and parsed.output_file == "/tmp/o.jsonl"


def rows(key, values):
    """Rounds whose four launches carry ``values`` (u1, o1, u2, o2) of ``key``."""
    return [{"upstream-1": {key: u1}, "overlay-1": {key: o1}, "upstream-2": {key: u2}, "overlay-2": {key: o2}}
            for u1, o1, u2, o2 in values]  # fmt: skip


def test_ratios_pair_overlay_with_upstream_and_each_side_with_itself(bench):
    ab, aa = bench.ratios(rows("x", [(10.0, 9.0, 20.0, 22.0)]), "x")
    assert ab == [0.9, 1.1] and aa == [2.0, 22.0 / 9.0]


def test_the_band_is_symmetric_in_log_terms(common):
    assert common.log_ratio_band([0.9]) == pytest.approx(common.log_ratio_band([1 / 0.9]))
    assert common.log_ratio_band([1.0, 1.0]) == 0.0


@pytest.mark.parametrize(
    ("ab", "aa", "better", "expected"),
    [
        ([0.97, 0.99, 0.98], [0.96, 1.03], "higher", "inside the A/A band"),
        ([0.90, 0.91, 0.89], [0.98, 1.01], "higher", "outside it by 8.9% (overlay worse)"),
        ([1.10, 1.12, 1.09], [0.98, 1.01], "higher", "outside it by 7.8% (overlay better)"),
        ([1.10, 1.12, 1.09], [0.98, 1.01], "lower", "outside it by 7.8% (overlay worse)"),  # e.g. TTFT
        ([0.90, 0.90], [0.90, 1.0], "higher", "inside the A/A band"),  # the band's edge is inside
    ],
)  # "outside by X": how far the median lies beyond the band's edge (0.90 against 0.98: 0.98 / 0.90 - 1 = 8.9%)
def test_a_verdict_is_the_median_ab_ratio_against_the_aa_band(bench, ab, aa, better, expected):
    v = bench.ratio_verdict(ab, aa, better)
    assert v["verdict"] == expected
    assert v["ab_range"] == [min(ab), max(ab)] and v["aa_range"] == [min(aa), max(aa)]
    lo, hi = v["aa_band"]
    assert lo == pytest.approx(1 / hi, abs=1e-4) and hi >= max(max(aa), 1 / min(aa)) - 1e-4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tp-size", "2"], "needs --model tiny"),
        (["--rounds", "0"], "at least 1"),
        (["--output-len", "1"], "--output-len at least 2"),
        (["--model", "huge"], "invalid choice"),
    ],
)
def test_bad_arguments_are_usage_errors_not_tracebacks(bench, argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err
