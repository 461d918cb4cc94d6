"""``GET /overlay/status`` on the server's HTTP process, and the client ``sglang-overlay status --url`` uses remotely.

:func:`attach` makes upstream's FastAPI ``app`` (``sglang.srt.entrypoints.http_server``; tokenizer workers
re-import it, so each worker serves the route too) add one route as it starts (:func:`install`, from its lifespan). The route answers
the report ``status --url`` builds from this host's records (``observe.server_status``), computed in the serving
process for its own port, plus ``served_by`` (that process's pid). It is a plain route of upstream's app, so
upstream's ``--api-key`` middleware asks for the key there exactly as on ``/server_info`` (auth level NORMAL).
:func:`fetch` is the other side: a server without the overlay answers 404 there (``NoOverlay``); an
unreachable server, a refused key or an answer of another shape is ``StatusUnavailable``, never a traceback.

Invariants: no upstream route is shadowed, moved or changed (the route is appended, and refused with
``OverlayError`` when the path is taken); the handler runs the scan in a worker thread, never on the event loop.
Cost: nothing until a request; per request one ``psutil`` socket scan and one small file read per process.
"""

from __future__ import annotations

import contextlib
import logging
import os
from urllib.parse import urlparse

from sglang_overlay.errors import OverlayError
from sglang_overlay.observe import server_status

PATH = "/overlay/status"
logger = logging.getLogger("sglang_overlay")
KEY_ENV = "OPENAI_API_KEY"  # what upstream's own tests and OpenAI clients send to a server run with --api-key


class NoOverlay(LookupError):
    """The server answers, but not at ``/overlay/status``: it runs without the overlay."""


class StatusUnavailable(LookupError):
    """The server could not be asked (unreachable, key refused, an answer of another shape)."""


class KeyRefused(StatusUnavailable):
    """The server asks for its API key (401/403): a server is there, behind whatever holds the port."""


def attach(app) -> None:
    """Serve the route from ``app``'s start (its lifespan), when every upstream route is defined, so the check
    that nothing answers there already sees them all; a failure there is one warning, never a stopped server."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(started_app):
        try:
            install(app)
        except Exception as exc:
            logger.warning("sglang-overlay: %s not served: %s", PATH, exc)
        async with inner(started_app) as state:
            yield state

    app.router.lifespan_context = lifespan


def install(app) -> bool:
    """Append ``GET /overlay/status`` to ``app``; False when this overlay's route is there already."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    taken = _answering(app)
    if taken is not None:
        if getattr(taken, "__module__", None) == __name__:
            return False
        raise OverlayError(f"cannot serve GET {PATH}: {taken!r} answers there already (another plugin?)")

    async def overlay_status(request):
        port = (request.scope.get("server") or (None, None))[1]
        try:
            report = await run_in_threadpool(server_status.server_status, f"http://127.0.0.1:{port}")
        except (server_status.ServerNotFound, server_status.RecordsUntrusted) as exc:
            return JSONResponse({"ok": False, "error": str(exc), "served_by": os.getpid()}, status_code=503)
        return JSONResponse({**report, "served_by": os.getpid()})

    app.add_route(PATH, overlay_status, methods=["GET"], include_in_schema=False)  # a Starlette route: (request)
    return True


def _answering(app):
    """The endpoint (or route) that would answer ``GET /overlay/status`` now, included routers and catch-alls
    too (Starlette's own matching), or None."""
    from starlette.routing import Match

    scope = {"type": "http", "method": "GET", "path": PATH, "root_path": "", "path_params": {}, "headers": []}
    for route in app.router.routes:
        try:
            match, child = route.matches(scope)
        except Exception:  # a route that cannot match a bare scope does not answer it either
            continue
        if match == Match.FULL:
            return child.get("endpoint") or getattr(route, "endpoint", None) or route
    return None


def fetch(url: str, api_key: str | None = None, timeout_s: float = 30.0) -> dict:
    """The report the server at ``url`` serves at ``/overlay/status`` (``NoOverlay`` where it serves none)."""
    import httpx

    parsed = urlparse(url if "://" in url else f"http://{url}")
    endpoint = f"{parsed.scheme}://{parsed.netloc}{parsed.path.rstrip('/')}{PATH}"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        answer = httpx.get(endpoint, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise StatusUnavailable(f"cannot reach {endpoint}: {exc!r}") from exc
    if answer.status_code == 404:
        raise NoOverlay(f"{endpoint} answered 404: the server runs without sglang-overlay")
    if answer.status_code in (401, 403):
        hint = "pass its key with --api-key" if not api_key else "the key given was refused"
        raise KeyRefused(f"{endpoint} answered {answer.status_code}: the server asks for its API key ({hint})")
    try:
        report = answer.json()
    except ValueError:
        report = None
    if not isinstance(report, dict) or not isinstance(report.get("processes", report.get("error")), (list, str)):
        raise StatusUnavailable(f"{endpoint} answered {answer.status_code} with something other than a status report")
    if "error" in report:
        raise StatusUnavailable(f"{endpoint}: the server could not read its own processes: {report['error']}")
    return {**report, "url": url, "source": f"GET {endpoint}"}
