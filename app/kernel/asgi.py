"""The shape of every middleware here: pure ASGI (never BaseHTTPMiddleware), HTTP requests only."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class HTTPMiddleware:
    """Passes anything but HTTP (lifespan, websockets) straight through; subclasses implement `handle`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError
