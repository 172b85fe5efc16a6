"""The one layer between the server and the router (pure ASGI, never BaseHTTPMiddleware): each concern's step
stays in its module, called here in order instead of stacked as a layer each (a frame, a send wrapper and a
scope check per layer per request: docs/benchmarks.md "Public pages when the cache misses")."""

from __future__ import annotations

from functools import partial

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.kernel import watchdog
from app.kernel.addresses import ForwardedHeaders
from app.kernel.limits import bounded
from app.kernel.logs import RequestLog
from app.kernel.security import add_security_headers, csrf_refused, is_no_store, with_reads


class Front:
    """Outermost first: the client address (every limit, log line and /metrics check reads the resolved one); the
    request id, metrics, Server-Timing and access line (`RequestLog`: every line logged below carries the id); the
    security headers, so the CSRF refusal and any error page carry them too; CSRF; the read-your-writes placement
    of reads; innermost, the body limit and the edge refusal (refusals still carry the headers, request id and
    metrics: docs/security.md). Anything but HTTP gets the forwarded headers only."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.forwarded = ForwardedHeaders(app)
        self.bounded = partial(bounded, app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.forwarded(scope, receive, send)
            return
        await self.forwarded.resolve(scope)
        log = RequestLog(scope)
        no_store = is_no_store(scope)
        started = False

        async def send_out(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                add_security_headers(message, no_store)
                log.respond(message)
            await send(message)

        try:
            with watchdog.in_flight(log.describe):
                try:
                    refused = csrf_refused(scope)
                    if refused is not None:
                        await refused(scope, receive, send_out)
                    else:
                        await with_reads(self.bounded, scope, receive, send_out)
                except Exception:
                    # Starlette's ServerErrorMiddleware sits outside us; answer the 500 here so it carries the
                    # headers too, then let the exception propagate to be logged
                    if not started:
                        await PlainTextResponse("500 Internal Server Error", status_code=500)(scope, receive, send_out)
                    raise
        finally:
            log.close()
