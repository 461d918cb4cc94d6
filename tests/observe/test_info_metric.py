"""``sglang_overlay_info`` on SGLang's multiprocess ``/metrics`` (``observe.info``), in a fresh interpreter (tier
ci_slow): prometheus_client picks its multiprocess value class at its first import, so only a process that has
not imported it yet shows what a server's process does. The real server's ``/metrics`` is in tests/e2e."""

from __future__ import annotations

import pytest

from sglang_overlay.core import lockfile
from sglang_overlay.core.registry import declared_overlay
from sglang_overlay.observe import info
from tests.support.proc import run_python

# What an SGLang process does under --enable-metrics: the plugin applies first, prometheus_client is imported
# later (once SGLang set PROMETHEUS_MULTIPROC_DIR), and the HTTP process reads every process's series.
SCRIPT = """
import sys
from sglang_overlay import apply
apply(role="scheduler", announce=False)
assert "prometheus_client" not in sys.modules
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print("METRICS" + generate_latest(registry).decode())
"""


@pytest.mark.ci_slow
def test_the_info_series_reaches_the_multiprocess_metrics_of_a_process(tmp_path):
    (tmp_path / "prom").mkdir()
    proc = run_python(SCRIPT, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prom"),
                      SGLANG_OVERLAY_STATUS_DIR=str(tmp_path / "status"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = proc.stdout.split("METRICS", 1)[1]
    (line,) = [x for x in metrics.splitlines() if x.startswith(info.METRIC + "{")]
    expected = info.labels(declared_overlay(), "scheduler")
    assert line.endswith(" 1.0") and all(f'{k}="{v}"' in line for k, v in expected.items()), line
    assert f'pin="{lockfile.read_pin().version}"' in line and 'lock_digest="sha256:' in line


@pytest.mark.ci_slow
def test_without_sglangs_metrics_nothing_is_published(tmp_path):
    """No PROMETHEUS_MULTIPROC_DIR (no --enable-metrics): the overlay creates no metric at all."""
    proc = run_python(SCRIPT.replace("multiprocess.MultiProcessCollector(registry)", "")
                      + "from sglang_overlay.observe import info\nassert not info._PUBLISHED\n",
                      SGLANG_OVERLAY_STATUS_DIR=str(tmp_path / "status"))  # fmt: skip
    assert proc.returncode == 0 and info.METRIC not in proc.stdout, proc.stderr[-3000:]


def test_the_cluster_check_compares_what_the_info_metric_says():
    """One declaration of the overlay a process runs: the ranks' report is ``core.registry.declared_overlay()``."""
    from sglang_overlay.patches.cluster_consistency.state import local_state

    state = local_state(0)
    assert {k: state[k] for k in declared_overlay()} == declared_overlay()
