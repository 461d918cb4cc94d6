"""``needs_full_gsm8k(why)``: conftest's ``requires_full_gsm8k`` with the test's own reason in its skip line.

The GSM8K tests run on the committed fixture; the few that need the full published splits say why, so a
skipped run shows what went unchecked (for example "every one of the 8,792 published answers ...").
"""

import pytest

from tests.support.env import requires_full_gsm8k


def needs_full_gsm8k(why: str) -> pytest.MarkDecorator:
    """Skip, with ``why`` first in the reason, where conftest finds no full splits (same condition)."""
    return pytest.mark.skipif(*requires_full_gsm8k.args, reason=f"{why}; {requires_full_gsm8k.kwargs['reason']}")
