"""Shared pytest set-up: offline, quiet, repository root importable (tests.support)."""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
GSM8K_DIR = SHARED / "data" / "gsm8k"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def subprocess_env(**extra: str) -> dict:
    """Environment for a fresh interpreter running the overlay from this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_")}
    env.pop("SGLANG_PLUGINS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env


# --------------------------------------------------------------------------- the two forms of the series
# SGLANG_OVERLAY_TEST_FORM=source runs the suites against an sglang tree carrying the diff series
# (tests/support/series_forms.py); tests about the runtime form itself skip there, with the reason.


def pytest_configure(config):
    import pytest

    from tests.support.series_forms import current_form, form_problem

    if not (GSM8K_DIR / "test.jsonl").is_file() or not (GSM8K_DIR / "train.jsonl").is_file():
        raise pytest.UsageError(
            f"the tests need the GSM8K splits in {GSM8K_DIR}: the project's shared/ folder beside the "
            "checkout (../shared/data/gsm8k/test.jsonl and train.jsonl)"
        )
    try:
        problem = form_problem(current_form())
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc
    if problem:
        raise pytest.UsageError(problem)


def pytest_collection_modifyitems(config, items):
    from tests.support.series_forms import current_form, source_form_skip_reason

    if current_form() != "source":
        return
    import pytest

    for item in items:
        reason = source_form_skip_reason(item.nodeid)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_report_header(config):
    from tests.support.series_forms import current_form

    return f"sglang-overlay form: {current_form()}"
