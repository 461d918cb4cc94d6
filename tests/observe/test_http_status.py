"""``GET /overlay/status`` (``observe.http_status``) and ``status --url`` over HTTP, in-process.

The route on a real FastAPI app (upstream's own app, under upstream's ``--api-key`` middleware, in a fresh
interpreter: tier ``ci_slow``); the client against a real HTTP server on loopback (the standard library's,
answering what a server with the overlay, one without it, and one with a key answer). The real servers, with
tokenizer workers, are ``tests/e2e/test_02_tokenizer_workers.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi import FastAPI
from starlette.requests import Request
from starlette.testclient import TestClient

from sglang_overlay import cli
from sglang_overlay.errors import OverlayError
from sglang_overlay.observe import http_status, server_status
from tests.support.env import subprocess_env


def _routes(app) -> list[tuple]:
    return [(getattr(r, "path", r), tuple(sorted(getattr(r, "methods", None) or ())), getattr(r, "endpoint", None))
            for r in app.router.routes]  # fmt: skip


def _upstream_like_app() -> FastAPI:
    app = FastAPI()

    @app.get("/server_info")
    async def server_info():
        return {"upstream": True}

    @app.api_route("/{path:path}", methods=["PUT"])  # a catch-all of another method must stay as it is
    async def anything(path: str):
        return {"path": path}

    return app


def test_install_appends_one_route_and_changes_no_other():
    app = _upstream_like_app()
    before = _routes(app)
    assert http_status.install(app) is True
    after = _routes(app)
    assert after[: len(before)] == before and len(after) == len(before) + 1
    assert after[-1][:2] == (http_status.PATH, ("GET", "HEAD"))
    assert http_status.install(app) is False and _routes(app) == after  # once per app


def test_attached_the_route_comes_at_the_apps_start_after_upstreams_own_lifespan_began():
    """``attach`` (what start-up does): nothing is added until the app starts; at its start the route is there,
    upstream's lifespan runs as before and its state reaches the requests."""
    import contextlib

    ran = []

    @contextlib.asynccontextmanager
    async def upstreams(app):
        ran.append("start")
        yield {"tokenizer": "ready"}
        ran.append("stop")

    app = FastAPI(lifespan=upstreams)

    @app.get("/state")
    async def state(request: Request):
        return {"tokenizer": request.state.tokenizer}

    http_status.attach(app)
    before = _routes(app)
    assert http_status.PATH not in [r[0] for r in before]
    with TestClient(app) as client:
        assert _routes(app)[: len(before)] == before and _routes(app)[-1][0] == http_status.PATH
        assert client.get("/state").json() == {"tokenizer": "ready"}
        assert client.get(http_status.PATH).status_code == 503  # ours answers (no server on the client's port)
    assert ran == ["start", "stop"]


def test_a_taken_path_at_start_is_a_warning_and_the_app_starts(caplog):
    app = FastAPI()

    @app.get(http_status.PATH)
    async def someone_elses():
        return {"theirs": True}

    http_status.attach(app)
    with TestClient(app) as client:
        assert client.get(http_status.PATH).json() == {"theirs": True}
    assert "/overlay/status not served: " in caplog.text and "someone_elses" in caplog.text


def test_a_taken_path_is_refused_and_nothing_is_added():
    app = _upstream_like_app()

    @app.get(http_status.PATH)
    async def someone_elses():
        return {}

    before = _routes(app)
    with pytest.raises(OverlayError, match="someone_elses.* answers there already"):
        http_status.install(app)
    assert _routes(app) == before


def test_a_catch_all_that_would_answer_first_is_refused_too():
    app = FastAPI()

    @app.get("/{anything:path}")
    async def catch_all(anything: str):
        return {}

    with pytest.raises(OverlayError, match="catch_all.* answers there already"):
        http_status.install(app)


def test_the_route_answers_503_with_the_reason_where_no_server_listens():
    """TestClient's server is ``testserver:80``: nothing listens there, so the scan finds no server; the answer
    is JSON with the reason and the serving pid, and upstream's route still answers as before."""
    app = _upstream_like_app()
    http_status.install(app)
    client = TestClient(app)
    answer = client.get(http_status.PATH)
    assert answer.status_code == 503
    body = answer.json()
    assert body["ok"] is False and "no local process listens on port 80" in body["error"]
    assert body["served_by"] == os.getpid()
    assert client.get("/server_info").json() == {"upstream": True}


class _Scripted(BaseHTTPRequestHandler):
    """Answers ``GET /overlay/status`` with the scripted code and body; records the Authorization header."""

    answer: tuple[int, bytes] = (404, b'{"detail": "Not Found"}')
    seen: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        code, body = type(self).answer
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    handler = type("Handler", (_Scripted,), {"seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


REPORT = {"ok": True, "url": "x", "port": 1, "cluster": None, "served_by": 7, "processes": [
    {"pid": 11, "title": "python -m sglang.launch_server", "overlay": True, "expected": True, "role": "main",
     "rank": "-", "node": "far-host", "live": ["openai-abort-status"], "patches": ["openai-abort-status"],
     "applied": {"openai-abort-status": ["t"]}, "pending_modules": [], "skipped": {}, "overlay_file": "f",
     "ok": True}]}  # fmt: skip


def test_status_over_http_prints_the_servers_own_rows_and_exit_code(scripted, capsys):
    handler, url = scripted
    handler.answer = (200, json.dumps(REPORT).encode())
    # this pytest process listens there, running neither SGLang nor the overlay: a forwarder, so over HTTP
    assert cli.main(["status", "--url", url]) == 0
    out = capsys.readouterr().out
    assert "far-host" in out and f"GET {url}/overlay/status" in out and "OK: every process" in out
    handler.answer = (200, json.dumps({**REPORT, "ok": False}).encode())
    assert cli.main(["status", "--url", url, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["source"] == f"GET {url}/overlay/status"
    assert handler.seen[-1] == ("/overlay/status", None)


def test_a_local_listener_that_serves_no_report_keeps_what_this_host_sees(scripted, capsys):
    """Not a forwarder after all (a program of its own answers 501 there): the local records' answer stands."""
    handler, url = scripted
    handler.answer = (501, b"")
    assert cli.main(["status", "--url", url, "--json"]) == 1  # this pytest process: no overlay record
    assert json.loads(capsys.readouterr().out)["source"] == "this host's process records"


def test_a_server_without_the_overlay_is_not_ok(scripted, capsys):
    handler, url = scripted
    assert cli.main(["status", "--url", url]) == 1
    assert "answered 404: the server runs without sglang-overlay" in capsys.readouterr().err


@pytest.mark.parametrize("code", [401, 403])
def test_a_refused_key_says_how_to_pass_one(scripted, capsys, code):
    handler, url = scripted
    handler.answer = (code, b'{"error": "Unauthorized"}')
    assert cli.main(["status", "--url", url]) == 2
    assert "asks for its API key (pass its key with --api-key)" in capsys.readouterr().err
    assert cli.main(["status", "--url", url, "--api-key", "k1"]) == 2
    assert "the key given was refused" in capsys.readouterr().err
    assert handler.seen[-1] == ("/overlay/status", "Bearer k1")


@pytest.mark.parametrize("body", [b"<html>a proxy's page</html>", b'{"processes": 3}', b"[1, 2]"])
def test_an_answer_of_another_shape_is_a_clear_error(scripted, capsys, body):
    """Asked over HTTP (``--http``); without it, a local listener that serves no report keeps the local answer."""
    handler, url = scripted
    handler.answer = (200, body)
    assert cli.main(["status", "--url", url, "--http"]) == 2
    err = capsys.readouterr().err
    assert "with something other than a status report" in err and "Traceback" not in err


def test_an_unreachable_server_is_a_clear_error(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nothing listens
    assert cli.main(["status", "--url", f"http://127.0.0.1:{port}", "--http"]) == 2
    assert f"cannot reach http://127.0.0.1:{port}/overlay/status" in capsys.readouterr().err


def test_another_host_is_never_read_from_this_hosts_records():
    assert not server_status.is_local_host("http://192.0.2.1:30000")  # TEST-NET-1: never this host
    assert server_status.is_local_host("http://127.0.0.1:30000") and server_status.is_local_host("localhost:1")


_ON_UPSTREAMS_APP = r"""
import json
from starlette.testclient import TestClient
from sglang.srt.entrypoints import http_server
from sglang.srt.utils.auth import add_api_key_middleware
from sglang_overlay.observe import http_status

app = http_server.app
before = [(getattr(r, "path", r), getattr(r, "endpoint", None)) for r in app.router.routes]
assert http_status.install(app)
after = [(getattr(r, "path", r), getattr(r, "endpoint", None)) for r in app.router.routes]
add_api_key_middleware(app, api_key="k1", admin_api_key=None)  # what upstream does under --api-key
client = TestClient(app)
print(json.dumps({
    "unchanged": after[:len(before)] == before, "added": [p for p, _ in after[len(before):]],
    "status_no_key": client.get("/overlay/status").status_code,
    "status_key": client.get("/overlay/status", headers={"Authorization": "Bearer k1"}).status_code,
    "server_info_no_key": client.get("/server_info").status_code,
}))
"""


@pytest.mark.ci_slow  # imports upstream's http_server (about 12 s) in a fresh interpreter
def test_on_upstreams_app_the_route_asks_for_the_key_like_upstreams_routes():
    """Upstream's real app and ``--api-key`` middleware: the route is appended (no route moved or changed) and
    refuses a request without the key exactly as ``/server_info`` does (401); with the key it is reached (503
    here: the test client's port has no server)."""
    out = subprocess.run([sys.executable, "-c", _ON_UPSTREAMS_APP], capture_output=True, text=True, timeout=300,
                         env=subprocess_env())  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["unchanged"] is True and seen["added"] == [http_status.PATH]
    assert seen["status_no_key"] == seen["server_info_no_key"] == 401
    assert seen["status_key"] == 503
