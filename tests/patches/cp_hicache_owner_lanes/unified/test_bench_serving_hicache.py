"""scripts/bench_serving_hicache.py without a server: the replay it sends and the re-prefill baseline it counts
against (the servers themselves are the e2e tier's, tests/e2e/test_09_owner_lanes_live.py)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support.env import REPO


def load_bench():
    spec = importlib.util.spec_from_file_location(
        "bench_serving_hicache", REPO / "scripts" / "bench_serving_hicache.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CharTokenizer:
    def encode(self, text):
        return [ord(c) for c in text]


def test_the_replay_is_seeded_and_each_turn_extends_the_last():
    bench = load_bench()
    convs = bench.conversations(7, 3, 4)
    assert convs == bench.conversations(7, 3, 4) and convs != bench.conversations(11, 3, 4)
    for conv in convs:
        assert all(later.startswith(earlier) and len(later) > len(earlier) for earlier, later in zip(conv, conv[1:]))
    order = bench.turn_major(convs)
    assert order[:3] == [c[0] for c in convs] and len(order) == 12


def test_already_prefilled_is_the_page_aligned_longest_earlier_prefix():
    bench = load_bench()
    a = "x" * 40
    order = [a, a + "y" * 10, "z" * 40, a + "y" * 30]
    # first: nothing earlier; second: 40 shared -> 32; third: nothing; fourth: 50 shared with the second -> 48
    assert bench.already_prefilled(order, CharTokenizer()) == [0, 32, 0, 48]


@pytest.mark.parametrize("bad", [["--shards", "1"], ["--tokens-per-class", "100"], ["--repeats", "0"]])
def test_bad_arguments_are_refused_before_any_server(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        load_bench().main(bad)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err
