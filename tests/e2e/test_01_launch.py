"""Both ways to launch (``sglang-overlay launch`` and plain ``python -m sglang.launch_server``) serve
completions and chat with the overlay in every process, announce it once per process, and
``sglang-overlay status`` agrees."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.real_server.active import PATCHES, active_lines
from tests.support.real_server.configs import OVERLAY_API_KEY, OVERLAY_MSGPACK, OVERLAY_PICKLE_CLI
from tests.support.real_server.server import run_status

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=[OVERLAY_PICKLE_CLI, OVERLAY_MSGPACK], ids=lambda c: c.name)
def server(request, server_pool):
    return server_pool.get(request.param)


def test_launched_through_the_configured_launcher(server):
    first = server.log_text().splitlines()[0]
    expected = "sglang-overlay launch" if server.config.launcher == "overlay" else "-m sglang.launch_server"
    assert expected in first, first


def test_completions_and_chat_with_the_openai_client(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    comp = client.completions.create(model=model, prompt="Natalia sold clips", max_tokens=6, temperature=0)
    assert comp.choices[0].finish_reason == "length" and comp.usage.completion_tokens == 6
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "How many clips?"}], max_tokens=6, temperature=0
    )
    assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 6
    chunks = list(
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=6, temperature=0, stream=True
        )
    )
    assert chunks and chunks[-1].choices[0].finish_reason == "length"


def test_streaming_completion_with_raw_httpx(server):
    body = {"model": "default", "prompt": "Weng earns", "max_tokens": 5, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as resp:
        assert resp.status_code == 200
        lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert events[-1]["choices"][0]["finish_reason"] == "length"


def test_every_process_announces_the_overlay_once(server):
    lines = active_lines(server)
    roles = [role for _, role, _, _ in lines]
    assert "scheduler" in roles and any(r in ("main", "http") for r in roles), lines
    pids = [pid for pid, *_ in lines]
    assert len(pids) == len(set(pids)), f"a process announced twice: {lines}"
    live = {p.pid for p in server.processes()}
    assert set(pids) <= live, f"announced pids {pids} are not this server's processes {sorted(live)}"
    for _, _, patches, fp in lines:
        assert patches == PATCHES and fp == "ok"


def test_status_command_lists_every_process_with_the_overlay(server):
    result = run_status(server.url, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["url"] == server.url
    listed = {p["pid"]: p for p in report["processes"]}
    live = {p.pid for p in server.processes()}
    assert set(listed) == live, f"status lists {sorted(listed)}, the server runs {sorted(live)}"
    schedulers = [p for p in report["processes"] if p["role"].strip().startswith("scheduler")]
    assert schedulers and all(p["overlay"] and set(p["patches"]) == PATCHES for p in schedulers)
    main = listed[server.pid]
    assert main["overlay"] and "openai-abort-status" in main["applied"]
    human = run_status(server.url)
    assert human.returncode == 0 and str(server.pid) in human.stdout


def test_under_api_key_overlay_status_asks_for_the_key_like_upstreams_routes(server_pool):
    """``--api-key``: upstream's middleware refuses ``/overlay/status`` without the key as it refuses
    ``/server_info``; ``status`` says to pass the key, and with it (``--api-key``, or ``$OPENAI_API_KEY`` as
    OpenAI clients read it) gets the server's report."""
    server = server_pool.get(OVERLAY_API_KEY)
    key = {"Authorization": f"Bearer {server.config.api_key}"}
    assert httpx.get(f"{server.url}/overlay/status", timeout=60).status_code == 401
    assert httpx.get(f"{server.url}/server_info", timeout=60).status_code == 401
    answer = httpx.get(f"{server.url}/overlay/status", headers=key, timeout=60)
    assert answer.status_code == 200 and answer.json()["ok"] is True, answer.text
    refused = run_status(server.url, "--http", OPENAI_API_KEY="")
    assert refused.returncode == 2 and "asks for its API key (pass its key with --api-key)" in refused.stderr
    assert run_status(server.url, "--http", "--api-key", "wrong").returncode == 2
    given = run_status(server.url, "--http", "--api-key", server.config.api_key)
    assert given.returncode == 0 and "OK: every process" in given.stdout, given.stdout + given.stderr
    from_env = run_status(server.url, "--http", OPENAI_API_KEY=server.config.api_key)
    assert from_env.returncode == 0, from_env.stderr
