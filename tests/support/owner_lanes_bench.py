"""The owner-lane benchmarks (scripts/bench_owner_lanes.py, scripts/bench_capacity.py) for the tests of every
release: run as a user runs them (a subprocess) or loaded in this process, and checked against their schema
(``scripts/owner_lanes/schema.py``): the same keys on every pin, a null figure always with its reason."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

from tests.support.env import REPO, subprocess_env

BENCH = REPO / "scripts" / "bench_owner_lanes.py"
CAPACITY = REPO / "scripts" / "bench_capacity.py"


def run_bench(cwd, *args, timeout=600, script=BENCH):
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load_bench(script=BENCH):
    """The benchmark as a module of this process (loading it puts scripts/ on sys.path)."""
    spec = importlib.util.spec_from_file_location(script.stem, script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def owner_lanes(name: str = ""):
    """``owner_lanes`` (or its submodule ``name``) of scripts/, importable from here on."""
    if str(REPO / "scripts") not in sys.path:
        sys.path.insert(0, str(REPO / "scripts"))
    return importlib.import_module("owner_lanes" + (f".{name}" if name else ""))


def assert_schema(result: dict, schema) -> None:
    """``result`` has exactly the schema's top-level keys, every row exactly its per-size keys, and every
    null figure of a row a reason in its ``not_measured`` (and nothing measured there)."""
    assert list(result) == list(schema.top), set(result) ^ set(schema.top)
    assert result["benchmark"] == schema.benchmark
    assert result["sizes"]
    for row in result["sizes"].values():
        assert list(row) == list(schema.size), set(row) ^ set(schema.size)
        nulls = {k for k, v in row.items() if v is None}
        assert nulls == set(row["not_measured"]), nulls ^ set(row["not_measured"])
        assert all(isinstance(why, str) and why for why in row["not_measured"].values())
