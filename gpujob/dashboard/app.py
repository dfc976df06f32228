"""The dashboard's HTTP side (Starlette): pages, JSON, server-sent events, the job buttons.

Every request must carry the token ``gpujob ui`` printed (``?token=`` once; the page then
holds a session secret in a same-site cookie, and a button's POST sends the token in a header
a foreign page cannot set); anything else gets 403. Pages are static files: the browser fills them from
JSON with ``textContent``, so a host's strings are never markup.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
from pathlib import Path
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.responses import JSONResponse as StarletteJSON
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Scope

from gpujob.dashboard.compare import compare
from gpujob.dashboard.hub import Hub
from gpujob.dashboard.logs import LogFollower
from gpujob.dashboard.terminal import CONTROL, shown
from gpujob.errors import GpujobError
from gpujob.jsontypes import JSONObject

STATIC = Path(__file__).resolve().parent / "static"
COOKIE = "gpujob_ui"
KEEPALIVE_S = 15.0
# On every answer. Any page on another localhost port (a TensorBoard a host serves through
# `gpujob tunnel`) is the same *site*, so the SameSite cookie goes with its requests: framed
# there, the dashboard would load, token and all, under a decoy that steers a click onto Stop.
# So no framing at all; the token never leaves in a Referer; nothing is cached or sniffed.
HEADERS = [(b"x-frame-options", b"DENY"), (b"content-security-policy", b"frame-ancestors 'none'"),
           (b"referrer-policy", b"no-referrer"), (b"x-content-type-options", b"nosniff"),
           (b"cross-origin-resource-policy", b"same-origin"), (b"cross-origin-opener-policy", b"same-origin")]


class TokenGate:
    """ASGI middleware: the token (query, cookie, or header for a POST) and a loopback Host header, else 403."""

    def __init__(self, app: Any, token: str, port_of: Callable[[], int], ticket: str | None = None,
                 on_ticket: Callable[[], Any] | None = None, session: str = "") -> None:
        self.app, self.token, self.port_of = app, token, port_of
        # the cookie's value, never the token: a browser sends 127.0.0.1's cookies to every port of it,
        # a host's TensorBoard behind `gpujob tunnel` too; what it learns there opens no POST
        self.session = session or secrets.token_urlsafe(24)
        self.ticket, self.on_ticket = ticket, on_ticket  # --open's one-time way in (server.landing)

    def _spend(self, req: Request) -> bool:
        """The first GET of the page with ``--open``'s ticket gets in (and the cookie); the ticket is
        then spent and its page deleted, so the file held no lasting secret."""
        given = req.query_params.get("ticket", "")
        if req.method != "GET" or req.url.path != "/" or not self.ticket or not given:
            return False
        if not secrets.compare_digest(given.encode(), self.ticket.encode()):
            return False
        self.ticket = None
        if self.on_ticket:
            try:
                self.on_ticket()
            except OSError:
                pass
        return True

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def guarded(message: Message) -> None:  # every answer, a 403 too, gets HEADERS
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        await self._gate(scope, receive, guarded)

    async def _gate(self, scope: Scope, receive: Any, send: Any) -> None:
        req = Request(scope)
        host = req.headers.get("host", "")
        allowed = {f"127.0.0.1:{self.port_of()}", f"localhost:{self.port_of()}"}
        if host not in allowed:  # a page elsewhere resolving its name to 127.0.0.1 (DNS rebinding)
            return await PlainTextResponse("wrong Host header: open the URL gpujob ui printed", 403)(scope, receive, send)
        if req.method == "POST":
            ok = secrets.compare_digest(req.headers.get("x-token", "").encode(), self.token.encode())
        else:
            ok = secrets.compare_digest(req.query_params.get("token", "").encode(), self.token.encode()) or \
                secrets.compare_digest(req.cookies.get(COOKIE, "").encode(), self.session.encode())
        if not ok and not self._spend(req):
            return await PlainTextResponse("missing or wrong token: open the URL gpujob ui printed (with its ?token=)",
                                           403)(scope, receive, send)
        await self.app(scope, receive, send)


def strict(v: Any) -> Any:
    """``v`` with each non-finite float (a diverged loss) as the word the page shows: ``"nan"``,
    ``"inf"``, ``"-inf"`` (strict JSON; the page draws a non-number as a gap, prints it as text); each
    string and key as a terminal shows it, no control character (a job's name, error, metric names, log)."""
    if isinstance(v, str):
        return shown(v) if CONTROL.search(v) else v
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {strict(k): strict(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [strict(x) for x in v]
    return v


class JSONResponse(StarletteJSON):
    """Strict JSON whatever a job reported. Starlette refuses a non-finite float, so one job's
    infinite loss (or a host's ``Infinity``) made every ``/api/jobs`` a 500: the whole table went blank."""

    def render(self, content: Any) -> bytes:
        return json.dumps(strict(content), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _ref(req: Request) -> tuple[str, str]:
    host, job_id = req.query_params.get("host", ""), req.query_params.get("id", "")
    if not host or not job_id:
        raise GpujobError("host and id are required", "open a job from the jobs page")
    return host, job_id


def _sse(event: str, data: Any, id: int | None = None) -> str:
    head = f"id: {id}\n" if id is not None else ""
    # the browser's JSON.parse takes no NaN/Infinity: the event would be lost (and the page's handler throw)
    return f"{head}event: {event}\ndata: {json.dumps(strict(data), allow_nan=False, separators=(',', ':'))}\n\n"


def build_app(hub: Hub, token: str, port_of: Callable[[], int], pull_dir: str = "gpujob-pulls",
              client_for: Callable[[], Any] | None = None, stopping: Callable[[], bool] = lambda: False,
              ticket: str | None = None, on_ticket: Callable[[], Any] | None = None) -> Any:
    """The ASGI app over ``hub``; ``client_for`` makes the ``gpujob.Client`` a button's action uses;
    once ``stopping()`` (Ctrl-C) the event streams end, so the server leaves without cutting them."""
    if client_for is None:
        from gpujob.api import Client

        client_for = Client
    shell = (STATIC / "index.html").read_text()
    session = secrets.token_urlsafe(24)  # the cookie (TokenGate)

    async def page(req: Request) -> Response:
        resp = HTMLResponse(shell.replace("{{TOKEN}}", token), headers={"Cache-Control": "no-store"})  # it holds the token
        resp.set_cookie(COOKIE, session, httponly=True, samesite="strict")
        return resp

    async def jobs(req: Request) -> Response:
        return JSONResponse(hub.rows())

    async def changes(req: Request, snapshot: Callable[[], Any], event: str) -> Any:
        """Each new version of ``snapshot()`` as an event; a comment now and then keeps the connection."""
        seen, quiet = -1, 0.0
        while not stopping() and not await req.is_disconnected():
            if hub.version != seen:
                seen = hub.version
                quiet = 0.0
                yield _sse(event, await run_in_threadpool(snapshot))
            elif quiet >= KEEPALIVE_S:
                quiet = 0.0
                yield ": keepalive\n\n"
            await asyncio.sleep(0.25)
            quiet += 0.25

    async def events(req: Request) -> Response:
        return StreamingResponse(changes(req, hub.rows, "jobs"), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    async def job(req: Request) -> Response:
        host, job_id = _ref(req)
        return JSONResponse(hub.watch(host, job_id).snapshot())

    async def job_stream(req: Request) -> Response:
        """One stream per job page (a browser opens at most six per origin): the job's status at
        each new version, and its log one line per event, the line's byte offset as the event id
        (a reconnect's Last-Event-ID resumes the log there)."""
        host, job_id = _ref(req)
        hub.conn(host)
        last = req.headers.get("last-event-id") or req.query_params.get("offset") or ""
        log = LogFollower(client_for, host, job_id, int(last) if last.isdigit() else None)

        async def stream() -> Any:
            log.start()
            seen, quiet = -1, 0.0
            try:
                while not stopping() and not await req.is_disconnected():
                    watcher = hub.watch(host, job_id)  # a tab that looks keeps the job's watcher alive
                    if hub.version != seen:
                        seen = hub.version
                        yield _sse("job", await run_in_threadpool(watcher.snapshot))
                    events = log.take()
                    for kind, doc in events:
                        offset = doc.get("offset")  # a line's, an int (logs.py)
                        yield _sse(kind, doc, offset if kind == "line" and isinstance(offset, int) else None)
                    quiet = 0.0 if events else quiet + 0.25
                    if quiet >= KEEPALIVE_S:
                        quiet = 0.0
                        yield ": keepalive\n\n"
                    log.revive(watcher.doc or {})
                    await asyncio.sleep(0.25)
            finally:
                log.close()

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    def action(name: str) -> Callable[[Request], Any]:
        async def run(req: Request) -> Response:
            host, job_id = _ref(req)
            hub.conn(host)

            def act() -> JSONObject:
                try:
                    with client_for() as c:
                        j = c.job(job_id, host=host)
                        if name == "stop":
                            return j.stop().to_json()
                        if name == "resume":
                            return j.resume().to_json()
                        return j.pull(pull_dir, latest=True).to_json()
                except (OSError, TimeoutError, EOFError) as e:  # the page says it; the server goes on
                    raise GpujobError(f"{name} {job_id}: {type(e).__name__}: {e}",
                                      f"gpujob {name} {job_id} --host {host} in a terminal says more") from None

            doc = await run_in_threadpool(act)
            hub.poke(host, job_id)
            return JSONResponse(doc)

        return run

    async def compared(req: Request) -> Response:
        keys = [k for k in req.query_params.get("runs", "").split(",") if k]
        source = req.query_params.get("source", "jobs")
        return JSONResponse(await run_in_threadpool(compare, hub, keys, source))

    async def ledger(req: Request) -> Response:
        """The run ledger (``Client.runs``: no host is asked), filtered and sorted as ``gpujob runs``."""
        q = req.query_params
        limit = q.get("limit", "200")
        if not limit.isdigit():
            raise GpujobError(f"limit {limit!r} is not a number", "a count of runs, 0 for all")

        def listed() -> JSONObject:
            with client_for() as c:
                return c.runs(name=q.get("name") or None, where=[w for w in q.getlist("where") if w.strip()],
                              sort=q.get("sort") or None, limit=int(limit)).to_json()

        return JSONResponse(await run_in_threadpool(listed))

    async def sweep(req: Request) -> Response:
        """A sweep's study (``Client.sweep_insight``: Optuna's history, the trials' parameters, its importances)."""
        name = req.query_params.get("name", "")
        if not name:
            raise GpujobError("sweep: no name given", "open a sweep from the runs page (its Sweep column)")

        def insight() -> JSONObject:
            with client_for() as c:
                return c.sweep_insight(name)

        return JSONResponse(await run_in_threadpool(insight))

    async def stats(req: Request) -> Response:
        return JSONResponse({"calls": hub.calls(), "interval": hub.interval})

    async def refused(req: Request, exc: Exception) -> Response:
        assert isinstance(exc, GpujobError)
        return JSONResponse(exc.to_json(), 400)

    routes = [
        Route("/", page), Route("/job", page), Route("/compare", page), Route("/runs", page),
        Route("/api/jobs", jobs), Route("/api/events", events), Route("/api/job", job),
        Route("/api/job/stream", job_stream),
        Route("/api/job/stop", action("stop"), methods=["POST"]),
        Route("/api/job/resume", action("resume"), methods=["POST"]),
        Route("/api/job/pull", action("pull"), methods=["POST"]),
        Route("/api/compare", compared), Route("/api/runs", ledger), Route("/api/sweep", sweep),
        Route("/api/stats", stats),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={GpujobError: refused})
    return TokenGate(app, token, port_of, ticket, on_ticket, session)
