"""Security steps of the front layer (app.kernel.asgi): headers on every response, CSRF by origin on unsafe
methods, and the read-your-writes mark (docs/security.md "Cross-site requests")."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.kernel import db
from app.kernel.config import settings

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)

SESSION_COOKIE_NAME = "tarakan_session"  # issued by app/accounts/sessions.py; CSRF checks requests that carry it

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Pages with per-user content or credentials: never stored by browsers or shared caches.
NO_STORE_PREFIXES = ("/moderation", "/login", "/logout")


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _request_origin(scope: Scope, headers: Headers) -> str | None:
    host = headers.get("host")
    if not host:
        return None
    return f"{scope.get('scheme', 'http')}://{host}".lower()


def csrf_refusal(scope: Scope) -> str | None:
    """Why this request must be refused as cross-origin, or None when it may proceed."""
    if scope["method"] not in UNSAFE_METHODS:
        return None
    headers = Headers(scope=scope)
    has_cookie = bool(headers.get("cookie"))
    if not has_cookie and headers.get("authorization", "").lower().startswith("bearer "):
        return None
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site in ("same-origin", "none"):
        return None
    origin = headers.get("origin")
    if origin is not None:
        allowed = {_origin_of(settings().base_url), _request_origin(scope, headers)}
        if origin.lower() in allowed:
            return None
        return f"the Origin {origin} is not this site"
    if fetch_site is not None:
        return f"Sec-Fetch-Site is {fetch_site} and no matching Origin was sent"
    if not has_cookie:
        return None
    return "the request carries a cookie but neither Origin nor Sec-Fetch-Site"


def csrf_refused(scope: Scope) -> Response | None:
    """The 403 of a request refused as cross-origin (`csrf_refusal`), or None when it may proceed."""
    reason = csrf_refusal(scope)
    if reason is None:
        return None
    return PlainTextResponse(
        f"403 Forbidden: cross-origin {scope['method']} refused ({reason}). "
        "Submit the form from this site's own pages.",
        status_code=403,
    )


def is_no_store(scope: Scope) -> bool:
    return str(scope.get("path", "")).startswith(NO_STORE_PREFIXES)


def add_security_headers(message: Message, no_store: bool) -> None:
    """The headers of every response, on its `http.response.start` (those it set itself are kept)."""
    headers = MutableHeaders(scope=message)
    headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "strict-origin-when-cross-origin")
    headers.setdefault("X-Frame-Options", "DENY")
    if no_store:
        headers["Cache-Control"] = "no-store"


READ_YOUR_WRITES_COOKIE = "tarakan_rw"
# Longer than any sane replica lag, short enough that a moderator's browsing goes back to the replica soon.
READ_YOUR_WRITES_SECONDS = 15


def _has_cookie(headers: Headers, name: str) -> bool:
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and value:
            return True
    return False


async def with_reads(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """`app` with the request's reads placed (docs/scaling.md): on the primary for a browser that just wrote (the
    read-your-writes cookie), which an unsafe request of a session sets on success; a safe request retried once
    on the primary after a recovery conflict."""
    headers = Headers(scope=scope)
    mark = scope["method"] in UNSAFE_METHODS and _has_cookie(headers, SESSION_COOKIE_NAME)

    async def send_with_mark(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] < 400:
            MutableHeaders(scope=message).append(
                "Set-Cookie",
                f"{READ_YOUR_WRITES_COOKIE}=1; Max-Age={READ_YOUR_WRITES_SECONDS}; HttpOnly; SameSite=Lax; Path=/",
            )
        await send(message)

    if _has_cookie(headers, READ_YOUR_WRITES_COOKIE):
        # the handler runs in this same context, so its replica reads see the flag
        with db.request_reads(), db.primary_reads():
            await app(scope, receive, send_with_mark if mark else send)
    elif scope["method"] in ("GET", "HEAD"):
        await _retry_recovery_conflict_on_primary(app, scope, receive, send)
    else:
        with db.request_reads():
            await app(scope, receive, send_with_mark if mark else send)


async def _retry_recovery_conflict_on_primary(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """A safe request whose read a hot standby canceled (a recovery conflict) or that found its pooled connection
    dead (a Postgres restart), answered 503 by the outage handler before anything was sent, runs once more with
    every read on the primary (docs/scaling.md, docs/reliability.md)."""
    dropped = False

    async def send_unless_retried(message: Message) -> None:
        nonlocal dropped
        if message["type"] == "http.response.start" and message["status"] == 503 and fence.retry:
            dropped = True
        if not dropped:
            await send(message)

    with db.request_reads() as fence:
        await app(scope, receive, send_unless_retried)
    if dropped:
        with db.request_reads(), db.primary_reads():
            await app(scope, receive, send)
