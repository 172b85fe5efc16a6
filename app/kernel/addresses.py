"""Client addresses: parsing, the group a per-address limit counts (an IPv4 address or an IPv6 /64), and the
forwarded headers of trusted proxies (docs/operations.md "Behind a proxy")."""

from __future__ import annotations

import ipaddress
import logging
from collections import OrderedDict

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app.kernel.config import forwarded_allow_ips

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPV6_GROUP_PREFIX = 64  # one subscriber's prefix: rotating addresses inside it buys nothing

log = logging.getLogger("tarakan.addresses")


def parse_address(host: str | None) -> IPAddress | None:
    """The IP address of `host`, an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as its IPv4; None when it is not
    an address (a unix socket, a test client's name)."""
    if not host:
        return None
    try:
        parsed = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return parsed.ipv4_mapped
    return parsed


def client_group(host: str | None) -> str:
    """What a per-address limit counts: an IPv4 address, or the /64 of an IPv6 one (`2001:db8::/64`); anything
    unparsable as given (capped), `unknown` for no address."""
    if not host:
        return "unknown"
    parsed = parse_address(host)
    if parsed is None:
        return host[:64]
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((parsed, IPV6_GROUP_PREFIX), strict=False))
    return str(parsed)


async def _resolved(scope: Scope, receive: Receive, send: Send) -> None:
    return None


async def _nothing(*_: object) -> None:
    return None


_FORWARDED = frozenset({b"x-forwarded-for", b"x-forwarded-proto", b"forwarded"})
_WARNED_PEERS = 1024  # peers remembered as already warned about (the oldest are forgotten first)


class ForwardedHeaders:
    """uvicorn's proxy headers (`X-Forwarded-For`, `X-Forwarded-Proto`) from the peers in FORWARDED_ALLOW_IPS;
    from any other peer they are ignored, and the first such request of each peer logs one warning (a proxy
    missing from FORWARDED_ALLOW_IPS makes every client look like the proxy to the per-address limits)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # uvicorn's own rules rewrite the scope; what it then calls is nothing (`resolve` is a step, not a layer)
        self.proxy = ProxyHeadersMiddleware(_resolved, trusted_hosts=forwarded_allow_ips())  # type: ignore[arg-type]
        self.warned: OrderedDict[str, None] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.resolve(scope)
        await self.app(scope, receive, send)

    async def resolve(self, scope: Scope) -> None:
        """The client and scheme of `scope` as a trusted proxy forwarded them (anything but HTTP and websockets
        untouched)."""
        if scope["type"] in ("http", "websocket"):
            peer = scope["client"][0] if scope.get("client") else None
            if peer not in self.proxy.trusted_hosts:
                names = sorted({name.decode() for name, _ in scope["headers"] if name in _FORWARDED})
                if names:
                    self._warn(peer or "unknown", names)
        await self.proxy(scope, _nothing, _nothing)  # type: ignore[arg-type]

    def _warn(self, peer: str, names: list[str]) -> None:
        if peer in self.warned:
            self.warned.move_to_end(peer)
            return
        self.warned[peer] = None
        if len(self.warned) > _WARNED_PEERS:
            self.warned.popitem(last=False)
        log.warning(
            "forwarded headers (%s) from %s, which FORWARDED_ALLOW_IPS does not trust, were ignored: if it is your "
            'proxy, add its address to FORWARDED_ALLOW_IPS (docs/operations.md "Behind a proxy"); logged once '
            "per peer",
            ", ".join(names),
            peer,
        )
