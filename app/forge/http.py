"""One bounded GET to a forge (docs/forge.md "Bounds"): https only (plain http to an explicit loopback base), never
to a private address, no proxy variables, no redirect followed, connect/read timeouts and a total deadline, at most
`max_bytes` read; a per-host token bucket in Redis shared by every process, and the forge's own "stop until"
(`X-RateLimit-Remaining: 0` + `X-RateLimit-Reset`, `Retry-After`) kept in Redis so no process asks before then."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from redis.asyncio import Redis

from app.kernel import outages
from app.kernel.config import forge_burst, forge_requests_per_second, is_loopback_host

CONNECT_SECONDS = 3.0
READ_SECONDS = 5.0
DEADLINE_SECONDS = 10.0  # one request's whole time, when its caller gives a later deadline or none
MAX_STOP_SECONDS = 3600.0  # a forge's "come back at" further away than this is read as this
RESOLVED_SECONDS = 60.0  # a public name's checked addresses are trusted this long in one process

# One round trip a request: the forge's "stop until" (KEYS[2], answered "stop <epoch>" while it is later than the
# caller's clock, ARGV[3]: the kind of clock that wrote it), else a token of KEYS[1], refilled at ARGV[1] a second up
# to ARGV[2]: "0" (a token taken) or the seconds until one is there (nothing taken). Redis's clock for the bucket,
# so every process agrees.
_TAKE = """
local stop = redis.call('GET', KEYS[2])
if stop and tonumber(stop) > tonumber(ARGV[3]) then return 'stop ' .. stop end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""
_PREFIX = "tarakan:rate:forge:"  # under the rate counters' prefix: the suite clears them per test


@dataclass(frozen=True)
class Reply:
    """`status` 0 with `trouble` set: no answer (`failed`: the network, the deadline, the rate; `refused`: a URL or
    an address we do not ask). Otherwise the forge's status, headers (lower-case names) and at most `max_bytes`."""

    status: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    truncated: bool = False
    trouble: Literal["", "failed", "refused"] = ""
    detail: str = ""
    rate: bool = False  # failed for want of rate, or the forge said stop


_ssl: ssl.SSLContext | None = None
# One pooled client an event loop: a forge asked again within KEEPALIVE_SECONDS reuses its connection (a new TCP and
# TLS handshake each request was most of the gate's cost: docs/benchmarks.md). Its connections belong to the loop.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()
KEEPALIVE_SECONDS = 30.0
POOL = httpx.Limits(max_connections=64, max_keepalive_connections=16, keepalive_expiry=KEEPALIVE_SECONDS)
_resolved: dict[str, float] = {}  # host name -> monotonic instant its public addresses were checked


def _context() -> ssl.SSLContext:
    global _ssl
    if _ssl is None:
        _ssl = httpx.create_ssl_context()  # once per process: building one per request costs milliseconds
    return _ssl


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        client = httpx.AsyncClient(trust_env=False, follow_redirects=False, verify=_context(), limits=POOL)
        _clients[loop] = client
    return client


async def close() -> None:
    """Close this event loop's pooled client (a process's shutdown)."""
    client = _clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


async def _redis() -> Redis:
    from app.kernel.queue import pool  # the process's one Redis pool, imported late as app.kernel.ratelimit does

    return await pool()


async def _stop(bucket: str, until: float) -> None:
    now = time.time()
    until = min(until, now + MAX_STOP_SECONDS)
    if until <= now:
        return
    try:
        await (await _redis()).set(_PREFIX + "stop:" + bucket, repr(until), px=int((until - now) * 1000) + 1)
    except outages.REDIS_ERRORS as exc:
        outages.record(outages.REDIS, exc, source="forge")


async def _token(bucket: str, deadline: float) -> float | bool:
    """Wait for one of `bucket`'s tokens until `deadline`: True (taken), False (none in time), or the epoch second
    before which the forge asked for no request. Redis away: no wait (fail open, as the other rates do; the
    forge's own limits still answer)."""
    rate, burst = forge_requests_per_second(), forge_burst()
    keys = [_PREFIX + "bucket:" + bucket, _PREFIX + "stop:" + bucket]
    while True:
        try:
            redis = await _redis()
            answer: Any = await redis.eval(_TAKE, 2, *keys, repr(rate), str(burst), repr(time.time()))  # type: ignore[misc]
        except outages.REDIS_ERRORS as exc:
            outages.record(outages.REDIS, exc, source="forge")
            return True
        text = answer.decode() if isinstance(answer, bytes) else str(answer)
        if text.startswith("stop "):
            return float(text[5:])
        wait = float(text)
        if wait <= 0:
            return True
        if time.monotonic() + wait > deadline:
            return False
        await asyncio.sleep(wait)


def _refused_address(address: str) -> str | None:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if not ip.is_global or ip.is_multicast:
        return f"{address} is not a public address"
    return None


async def _address_trouble(host: str, port: int, deadline: float) -> Reply | None:
    """None when `host` may be asked: an explicit loopback base, or a name whose every address is public."""
    if is_loopback_host(host):
        return None  # only an operator's (or a test's) explicit base names loopback: no default does
    try:
        refusal = _refused_address(host)
        return Reply(trouble="refused", detail=f"the forge address {refusal}") if refusal else None
    except ValueError:
        pass  # a name
    checked = _resolved.get(host)
    if checked is not None and time.monotonic() - checked < RESOLVED_SECONDS:
        return None
    try:
        async with asyncio.timeout(max(0.0, min(CONNECT_SECONDS, deadline - time.monotonic()))):
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        return Reply(trouble="failed", detail=f"{host} could not be resolved")
    for *_, sockaddr in infos:
        refusal = _refused_address(str(sockaddr[0]))
        if refusal:
            return Reply(trouble="refused", detail=f"{host} resolves to a refused address: {refusal}")
    _resolved[host] = time.monotonic()
    return None


def _stop_from(headers: Mapping[str, str]) -> float | None:
    """The epoch second the forge said to come back at, from its rate-limit headers; None: it did not say stop."""
    retry = headers.get("retry-after", "").strip()
    if retry.isdigit():
        return time.time() + int(retry)
    if headers.get("x-ratelimit-remaining", "").strip() == "0":
        reset = headers.get("x-ratelimit-reset", "").strip()
        return float(reset) if reset.isdigit() else time.time() + 60.0
    return None


async def get(
    url: str,
    *,
    bucket: str,
    deadline: float | None,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    read_seconds: float = READ_SECONDS,
    max_seconds: float = DEADLINE_SECONDS,
) -> Reply:
    """GET `url` under the bounds of the module docstring; `bucket` names the rate it spends ("github.com:api")."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback_host(host)):
        return Reply(trouble="refused", detail="the forge URL must be https")
    end = time.monotonic() + max_seconds
    if deadline is not None:
        end = min(end, deadline)
    taken = await _token(bucket, end)
    if taken is False:
        return Reply(trouble="failed", detail="no forge rate left in time", rate=True)
    if taken is not True:
        detail = f"the forge asked for no request before {time.strftime('%H:%M:%S', time.gmtime(taken))} UTC"
        return Reply(trouble="failed", detail=detail, rate=True)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    trouble = await _address_trouble(host, port, end)
    if trouble is not None:
        return trouble
    left = end - time.monotonic()
    if left <= 0:
        return Reply(trouble="failed", detail="the forge did not answer in time")
    timeout = httpx.Timeout(
        connect=min(CONNECT_SECONDS, left), read=read_seconds, write=read_seconds, pool=CONNECT_SECONDS
    )
    sent = {"Accept-Encoding": "identity", "User-Agent": "tarakan (+docs/forge.md)", **(headers or {})}
    try:
        async with (
            asyncio.timeout(left),
            _client().stream("GET", url, headers=sent, timeout=timeout) as response,
        ):
            answered = {name.lower(): value for name, value in response.headers.items()}
            stop = _stop_from(answered)
            if stop is not None:
                await _stop(bucket, stop)
            if response.status_code != 200:
                return Reply(response.status_code, answered)
            if answered.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
                return Reply(response.status_code, answered, trouble="failed", detail="a compressed answer")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > max_bytes:
                    break  # leaving the block closes the connection: nothing further is read
            return Reply(200, answered, bytes(body[:max_bytes]), truncated=len(body) > max_bytes)
    except (TimeoutError, httpx.HTTPError, OSError) as exc:
        return Reply(trouble="failed", detail=failure(exc))


def failure(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "the forge did not answer in time"
    if isinstance(exc, httpx.ConnectError):
        return "the forge could not be reached (DNS or connection)"
    return "the forge's answer broke off"
