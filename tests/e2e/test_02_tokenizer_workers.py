"""``--tokenizer-worker-num 2``: the workers (started by uvicorn's spawn, where SGLang never calls
``load_plugins()``) must carry the overlay too, announce it, and show in ``sglang-overlay status``.

FAILING-FIRST (before the lead's child-process bootstrap): no worker applied the overlay, so the INFO
lines and status records of ``role=tokenizer_worker`` were missing; the abort consequence (a real 503
reaching a streaming client as HTTP 200 + ``finish_reason: "abort"`` under msgpack IPC) is pinned in
``test_03_abort_matrix.py`` (cells ``overlay-msgpack-w2-aborts``)."""

from __future__ import annotations

import json

import pytest

from tests.support.real_server.active import PATCHES, active_lines
from tests.support.real_server.configs import OVERLAY_MSGPACK_W2, OVERLAY_PICKLE_W2
from tests.support.real_server.server import run_status

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=[OVERLAY_PICKLE_W2, OVERLAY_MSGPACK_W2], ids=lambda c: c.name)
def server(request, server_pool):
    return server_pool.get(request.param)


def worker_processes(server):
    return server.tokenizer_workers()


def test_two_tokenizer_workers_run(server):
    assert len(worker_processes(server)) == 2, [" ".join(p.cmdline()) for p in server.processes()]


def test_each_tokenizer_worker_announces_the_overlay_once(server):
    workers = {p.pid for p in worker_processes(server)}
    announced = [pid for pid, role, patches, fp in active_lines(server) if pid in workers]
    assert sorted(announced) == sorted(workers), (
        f"tokenizer workers {sorted(workers)} announced {announced}: a worker without the overlay"
    )


def test_status_shows_the_overlay_in_each_worker(server):
    result = run_status(server.url, "--json")
    report = json.loads(result.stdout)
    workers = {p.pid for p in worker_processes(server)}
    rows = {p["pid"]: p for p in report["processes"]}
    missing = [pid for pid in workers if not rows.get(pid, {}).get("overlay")]
    assert not missing, f"status: tokenizer workers without the overlay: {missing}\n{result.stdout}"
    assert all("openai-abort-status" in rows[pid]["applied"] for pid in workers)
    assert report["ok"] is True and result.returncode == 0
    assert all(set(rows[pid]["patches"]) == PATCHES for pid in workers)


def test_every_process_runs_the_overlay_under_test(server):
    """Each process's record names the overlay it imported: this checkout's sources, or, where CI installed the
    built wheel (SGLANG_OVERLAY_TEST_INSTALLED=1), the wheel's copy in site-packages, in every process,
    the tokenizer workers (entered by the wheel's .pth hook) included."""
    from tests.support.env import REPO, overlay_under_test

    report = json.loads(run_status(server.url, "--json").stdout)
    files = {p["pid"]: p["overlay_file"] for p in report["processes"] if p["overlay"]}
    workers = {p.pid for p in worker_processes(server)}
    assert workers <= set(files) and len(files) >= 4, files  # http, 2 workers, scheduler
    if overlay_under_test() == "installed":
        assert all(f.endswith("site-packages/sglang_overlay") for f in files.values()), files  # the wheel's copy
    else:
        assert set(files.values()) == {str(REPO / "sglang_overlay")}, files


def test_the_status_table_is_one_line_per_process_within_100_columns(server):
    """SGLang pads its process titles (``sglang::scheduler`` and about 120 spaces): the table shows node, rank,
    role, pid and the patches live in each process, one line each, and fits a 100-column terminal."""
    text = run_status(server.url).stdout
    report = json.loads(run_status(server.url, "--json").stdout)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100, text
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == len(report["processes"]), text
    for p in report["processes"]:
        assert p["role"] == p["role"].strip() and " " not in p["role"], p["role"]
        assert p["live"] == sorted(p["applied"])  # live: a target hooked there, not merely pending
    schedulers = [p for p in report["processes"] if p["role"] == "scheduler"]
    assert len(schedulers) == 1 and schedulers[0]["rank"] in ("-", "TP0"), report["processes"]  # one rank here


def test_metrics_carry_the_overlay_info_of_the_scheduler_and_the_http_workers(server):
    """``--enable-metrics``: /metrics (SGLang's multiprocess collector, served by a tokenizer worker) carries
    ``sglang_overlay_info`` = 1 from the scheduler and the HTTP side, each with this overlay's build labels."""
    from sglang_overlay.core.registry import declared_overlay
    from sglang_overlay.observe import info
    from tests.support.real_server.probes import overlay_info_series

    series = overlay_info_series(server.url)
    expected = {k: v for k, v in info.labels(declared_overlay(), "").items() if k not in ("role", "strict")}
    assert series and all(s["value"] == 1 for s in series), series
    assert all({k: s["labels"][k] for k in expected} == expected for s in series), (expected, series)
    roles = {s["labels"]["role"] for s in series}
    assert "scheduler" in roles and roles & {"http", "tokenizer_worker"}, roles


def test_the_http_side_serves_overlay_status_with_every_process(server):
    """``GET /overlay/status``, answered by a tokenizer worker (uvicorn's workers share the port): the same
    processes, patches and verdict as the local records give."""
    import httpx

    local = json.loads(run_status(server.url, "--json").stdout)
    answer = httpx.get(f"{server.url}/overlay/status", timeout=60.0)
    assert answer.status_code == 200, answer.text
    served = answer.json()
    assert served["served_by"] in {p.pid for p in worker_processes(server)}, served["served_by"]
    assert served["ok"] is True and local["ok"] is True
    pick = ("pid", "role", "overlay", "live", "patches")
    assert [{k: p[k] for k in pick} for p in served["processes"]] == [
        {k: p[k] for k in pick} for p in local["processes"]
    ]


def test_status_through_a_forwarder_asks_the_server_over_http(server):
    """Behind a port-forward (kubectl, SSH) the port's listener is not an SGLang process here: ``status --url``
    asks the server's ``/overlay/status`` and prints the same rows, with the same exit code."""
    from tests.support.forwarder import forwarded

    local = json.loads(run_status(server.url, "--json").stdout)
    with forwarded(server.port) as url:
        result = run_status(url, "--json")
        table = run_status(url)
    assert result.returncode == 0 and table.returncode == 0, (result.stdout, result.stderr)
    remote = json.loads(result.stdout)
    assert remote["source"] == f"GET {url}/overlay/status"
    assert [p["pid"] for p in remote["processes"]] == [p["pid"] for p in local["processes"]]
    assert f"GET {url}/overlay/status" in table.stdout and "OK: every process" in table.stdout
