"""Where a webhook may point: the SSRF rule at registration and at connect time (docs/security.md "Webhook
destinations"). `resolver` is looked up at every call, so a test can swap in its own; the system resolver runs on a
small thread pool of its own (docs/security.md "Webhook destinations", the lookup)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from app.kernel.config import webhook_allow_private
from app.kernel.text import is_clean

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[Address]]]

MAX_URL_LENGTH = 2000
RESOLVE_SECONDS = 3.0
# the ports a webhook URL may name (any with WEBHOOK_ALLOW_PRIVATE=1): the registry must not probe other services of
# a public host for whoever registers a URL
PORTS = (443, 8443)
DNS_THREADS = 4  # lookups at once per process; one past them fails at once (the delivery is retried on the schedule)

# (network, what it is): named in the refusal. Python's `is_global` catches most of these too (and what is added
# to the registries later); the table names them, and holds the ones `is_global` lets through (multicast, 6to4,
# NAT64, whose gateways forward to IPv4 addresses inside).
_REFUSED: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.ip_network(network), what)
    for network, what in (
        ("0.0.0.0/8", "this network (0.0.0.0/8)"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (CGNAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.169.254/32", "cloud metadata"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("::/96", "IPv4-compatible"),
        ("64:ff9b::/96", "NAT64"),
        ("64:ff9b:1::/48", "NAT64"),
        ("100::/64", "discard"),
        ("2001::/23", "IETF protocol assignments"),
        ("2001:db8::/32", "documentation"),
        ("2002::/16", "6to4"),
        ("fd00:ec2::254/128", "cloud metadata"),
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)


def refusal(address: Address) -> str | None:
    """What a refused address is (`loopback`, `private`, `cloud metadata`, ...), or None for an address a webhook
    may reach."""
    for network, what in _REFUSED:
        if address.version == network.version and address in network:
            return what
    if not address.is_global or address.is_multicast:
        return "not a public address"
    return None


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class ResolverBusy(OSError):
    """Every lookup thread is taken (by lookups that may be stuck): this one is not even started."""


# A timeout frees the caller, not the thread: a lookup stuck in the system resolver keeps its thread (and its slot,
# released when it returns), so stuck lookups cannot grow the pool nor take asyncio's default executor from others.
_dns_pool = ThreadPoolExecutor(max_workers=DNS_THREADS, thread_name_prefix="webhook-dns")
_dns_slots = threading.BoundedSemaphore(DNS_THREADS)
getaddrinfo = socket.getaddrinfo  # the system's, looked up at every lookup (a test stands in for a stuck resolver)


def _lookup(host: str, port: int) -> list[tuple[int, str]]:
    infos = getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [(family, str(sockaddr[0])) for family, *_, sockaddr in infos]


async def system_resolver(host: str, port: int) -> list[Address]:
    """The host's addresses from the system resolver, on the lookup pool, within RESOLVE_SECONDS: ResolverBusy at
    once while DNS_THREADS lookups run, OSError or TimeoutError when it cannot be resolved."""
    if not _dns_slots.acquire(blocking=False):
        raise ResolverBusy("every lookup thread is busy")
    try:
        job: Future[list[tuple[int, str]]] = _dns_pool.submit(_lookup, host, port)
    except BaseException:
        _dns_slots.release()
        raise
    job.add_done_callback(lambda _: _dns_slots.release())  # also when cancelled before it ran
    async with asyncio.timeout(RESOLVE_SECONDS):
        infos = await asyncio.wrap_future(job)
    found: list[Address] = []
    for family, raw in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            address = ipaddress.ip_address(raw.split("%", 1)[0])
            if address not in found:
                found.append(address)
    return found


resolver: Resolver = system_resolver


@dataclass(frozen=True)
class Destination:
    """A webhook URL taken apart: the URL as stored, the host as resolved and sent (IDNA, lowercase), the port."""

    url: str
    host: str
    port: int
    https: bool

    @property
    def literal(self) -> Address | None:
        return _literal(self.host)


class Refused(Exception):
    """The destination may not be reached; the message says why (never which inside address a name gave)."""


class Unresolved(Refused):
    """The host did not resolve: refused at registration; at connect time, like any failure to connect."""


def parse(raw: str) -> Destination:
    """The destination of a webhook URL, or Refused: https (http only with WEBHOOK_ALLOW_PRIVATE=1), a host, one of
    PORTS (any with WEBHOOK_ALLOW_PRIVATE=1), no user name or password, no fragment, at most MAX_URL_LENGTH
    characters of clean text."""
    if len(raw) > MAX_URL_LENGTH:
        raise Refused(f"must be at most {MAX_URL_LENGTH} characters")
    if not is_clean(raw) or any(c.isspace() for c in raw):
        raise Refused("must not hold spaces or control characters")
    try:  # IDNA decoding happens as the parts are read: a bad label raises there (UnicodeError is a ValueError)
        url = httpx.URL(raw)
        scheme, port, userinfo, fragment = url.scheme, url.port, url.userinfo, url.fragment
        host = url.raw_host.decode("ascii").lower().rstrip(".") if url.host else ""
        normalized = str(url)
    except (httpx.InvalidURL, ValueError):
        raise Refused("is not a URL") from None
    schemes = ("https", "http") if webhook_allow_private() else ("https",)
    if scheme not in schemes:
        raise Refused("must be an https URL")
    if not host:
        raise Refused("must name a host")
    if userinfo:
        raise Refused("must not hold a user name or password")
    if fragment:
        raise Refused("must not hold a fragment (#...)")
    if port is not None and not 0 < port < 65536:
        raise Refused("must name a port from 1 to 65535")
    https = scheme == "https"
    port = port or (443 if https else 80)
    if port not in PORTS and not webhook_allow_private():
        raise Refused(f"must use port {' or '.join(map(str, PORTS))}")
    return Destination(normalized, host, port, https)


async def addresses(destination: Destination) -> list[Address]:
    """The destination's addresses: the literal, or the resolver's answer (Unresolved when the name does not
    resolve)."""
    literal = destination.literal
    if literal is not None:
        return [literal]
    try:
        found = await resolver(destination.host, destination.port)
    except (OSError, TimeoutError, UnicodeError):
        raise Unresolved("its host could not be resolved") from None
    if not found:
        raise Unresolved("its host could not be resolved")
    return found


def _refused_only(found: list[Address]) -> Refused:
    kinds = sorted({refusal(a) or "" for a in found})
    return Refused(f"its host is or resolves only to refused addresses ({', '.join(kinds)})")


async def check_registration(raw: str) -> Destination:
    """The destination of a URL a maintainer registers, or Refused: the URL rules of `parse`, and a host that is, or
    resolves to, at least one address that is not refused (a name with public and inside addresses passes: the
    delivery connects only to a public one)."""
    destination = parse(raw)
    found = await addresses(destination)
    if not webhook_allow_private() and all(refusal(a) is not None for a in found):
        raise _refused_only(found)
    return destination


async def connect_address(destination: Destination) -> Address:
    """The address a delivery connects to, resolved now: the first one that is not refused (any, with
    WEBHOOK_ALLOW_PRIVATE=1); Refused when there is none (the URL rules are checked again too)."""
    destination = parse(destination.url)
    found = await addresses(destination)
    if webhook_allow_private():
        return found[0]
    allowed = [a for a in found if refusal(a) is None]
    if not allowed:
        raise _refused_only(found)
    return allowed[0]
