"""openai-abort-status releases a request's LoRA reference exactly once, for every abort status.

The counts come from upstream's own ``LoRARegistry`` (its ``ConcurrentCounter`` per adapter) in
a fresh interpreter that drives upstream's ``TokenizerManager`` request path
(``lora_accounting.py``): one request per case, then what it left on the adapter's usage count: 0
when the request released its reference exactly once, -1 after a double release, +1 after
none. The expectations are written out by hand.
"""

from __future__ import annotations

import pytest

from tests.patches.openai_abort_status.lora_accounting import MODES, VIAS, run_accounting
from tests.support.abort_scripts import ABORT_CODES, BAD_REQUEST_KEYS

pytestmark = pytest.mark.ci_slow  # the LoRA driver in fresh processes

# What the request ends with, per abort code (both ways an abort can finish a request).
ERROR_STATUS = {
    "bool_true": 500, "float_503": 503, "float_503_5": 500, "httpstatus_503": 503, "int_503": 503,
    "intenum_429": 429, "neg_1": 500, "np_503": 503, "str_429_spaces": 429, "str_503": 503,
    "str_abc": 500, "unconvertible": 500, "unknown_599": 500, "zero": 500,
}  # fmt: skip
BAD_REQUEST = BAD_REQUEST_KEYS  # upstream's ValueError path, kept


@pytest.fixture(scope="module")
def patched():
    return run_accounting()


def expected_outcome(key: str, mode: str) -> str:
    if key == "none":
        return "abort None"
    if key in BAD_REQUEST:
        return "ValueError" if mode == "non_stream" else "abort 400"
    status = ERROR_STATUS[key]
    return f"HTTPException {status}" if mode == "non_stream" else f"abort {status}"


def test_the_cases_cover_every_abort_code():
    assert set(ERROR_STATUS) | set(BAD_REQUEST) | {"none"} == set(ABORT_CODES)


@pytest.mark.parametrize("mode", MODES)
def test_a_normal_finish_releases_once(patched, mode):
    assert patched[f"finished/output/{mode}"] == {"count": 0, "outcome": "finished"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("key", sorted(ABORT_CODES))
def test_every_abort_releases_the_lora_reference_exactly_once(patched, key, via, mode):
    assert patched[f"{key}/{via}/{mode}"] == {"count": 0, "outcome": expected_outcome(key, mode)}
