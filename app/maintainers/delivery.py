"""Sending webhook deliveries: one signed POST per change-feed entry and webhook, pinned to an address checked at
connect time (docs/domain.md §14 "Webhooks", docs/security.md "Webhook destinations"); the caller passes the
feed's renderer (`app.feed` sits above this feature)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.kernel.metrics import WEBHOOK_DELIVERIES, WEBHOOK_OLDEST_DUE_AGE, WEBHOOK_PENDING, WEBHOOKS_DISABLED
from app.maintainers import destinations, embargoed, webhook_queue
from app.maintainers.webhook_queue import Claimed

log = logging.getLogger(__name__)

# the change-feed entry `seq` as GET /api/v1/changes serves it now (JSON values), or None when there is none
Render = Callable[[int], Awaitable[dict[str, Any] | None]]

CONNECT_SECONDS = 3.0
READ_SECONDS = 5.0
DEADLINE_SECONDS = 10.0  # the whole request: a receiver dripping bytes still ends here (well inside the lease)
USER_AGENT = "Tarakan-Webhook/1"
LANES = 8  # deliveries in flight at once per run (one per webhook at most: only heads are due)
RUN_SECONDS = 30.0  # a run stops claiming after this; the worker rings the next one

# The TLS context of every delivery (None: httpx's default, certificate and host name verified, made once: loading
# the CA bundle costs ~80 ms); tests swap in one that trusts their own certificate authority.
tls_context: ssl.SSLContext | None = None
_default_tls: ssl.SSLContext | None = None


def _tls() -> ssl.SSLContext:
    global _default_tls
    if tls_context is not None:
        return tls_context
    if _default_tls is None:
        _default_tls = httpx.create_ssl_context(trust_env=False)
    return _default_tls


def body_of(delivery: str, entry: dict[str, Any]) -> bytes:
    """The exact bytes sent (and signed)."""
    return json.dumps({"delivery": delivery, "entry": entry}, separators=(",", ":"), ensure_ascii=False).encode()


def signature(secret: str, body: bytes) -> str:
    """`X-Tarakan-Signature-256`: `sha256=` and the hex HMAC-SHA256 of `body` keyed with the secret's UTF-8 bytes."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_v2(secret: str, timestamp: int, body: bytes) -> str:
    """`X-Tarakan-Signature-V2`: the same over `<timestamp>.` and `body`, so a receiver that checks the timestamp's
    age refuses a captured delivery replayed later (docs/security.md "Webhook signatures")."""
    return signature(secret, b"%d." % timestamp + body)


def headers_of(claimed: Claimed, body: bytes, *, now: float | None = None) -> dict[str, str]:
    """The headers of one attempt; the timestamp is this attempt's (a retry is signed again)."""
    timestamp = int(time.time() if now is None else now)
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Accept-Encoding": "identity",
        "X-Tarakan-Event": claimed.kind,
        "X-Tarakan-Delivery": str(claimed.delivery),
        "X-Tarakan-Signature-256": signature(claimed.secret, body),
        "X-Tarakan-Timestamp": str(timestamp),
        "X-Tarakan-Signature-V2": signature_v2(claimed.secret, timestamp, body),
    }


@dataclass(frozen=True)
class Sent:
    """What the receiver answered (`status`), or why there is no answer (`error`, as the owner reads it; `cause`,
    what happened, for the worker's log only)."""

    status: int | None
    error: str | None = None
    cause: str | None = field(default=None, compare=False)

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


# Every attempt without an answer reads the same (DNS, refused, reset, TLS, timeout): the log is shown to whoever
# registered the URL, and telling these apart would let them probe hosts and ports from the registry's address.
UNREACHABLE = "unreachable"


async def post(url: str, body: bytes, headers: dict[str, str]) -> Sent:
    """POST `body` to the webhook URL under the rules of the module docstring."""
    try:
        destination = destinations.parse(url)
        address = await destinations.connect_address(destination)
    except destinations.Unresolved as exc:
        return Sent(None, UNREACHABLE, str(exc))
    except destinations.Refused as exc:
        return Sent(None, f"refused destination: {exc}")
    parts = httpx.URL(destination.url)
    target = parts.copy_with(host=str(address))
    extensions: dict[str, Any] = {}
    if destination.https and destination.literal is None:
        extensions["sni_hostname"] = destination.host  # SNI, and the name the certificate must hold
    timeout = httpx.Timeout(connect=CONNECT_SECONDS, read=READ_SECONDS, write=READ_SECONDS, pool=CONNECT_SECONDS)
    try:
        async with (
            asyncio.timeout(DEADLINE_SECONDS),
            httpx.AsyncClient(
                trust_env=False,
                follow_redirects=False,
                timeout=timeout,
                verify=_tls(),
            ) as client,
        ):
            request = client.build_request(
                "POST",
                target,
                content=body,
                headers={**headers, "Host": parts.netloc.decode("ascii")},
                extensions=extensions,
            )
            response = await client.send(request, stream=True)
            await response.aclose()  # the receiver's body is never read
            return Sent(response.status_code)
    except (TimeoutError, httpx.HTTPError, OSError) as exc:
        return Sent(None, UNREACHABLE, f"{type(exc).__name__}: {exc}")


async def attempt(claimed: Claimed, render: Render) -> str:
    """Send one claimed delivery and settle it; returns `delivered`, `failed`, `disabled` or `stale` (its lease was
    taken over meanwhile; `dropped`: a private entry with nothing left to show)."""
    if claimed.canonical_finding_id is not None:  # a private entry: rendered from its clock, never the feed
        entry = await embargoed.webhook_entry(claimed.canonical_finding_id, claimed.webhook_id)
        if entry is None:
            return "dropped" if await webhook_queue.settle_dropped(claimed) else "stale"
    else:
        entry = None if claimed.seq is None else await render(claimed.seq)
    if entry is None:  # the feed always keeps its entries; this would be a bug, retried on the schedule
        sent = Sent(None, "the change-feed entry could not be read")
    else:
        body = body_of(str(claimed.delivery), entry)
        sent = await post(claimed.url, body, headers_of(claimed, body))
    if sent.delivered:
        WEBHOOK_DELIVERIES.labels(outcome="delivered").inc()
        return "delivered" if await webhook_queue.settle_delivered(claimed, sent.status or 0) else "stale"
    WEBHOOK_DELIVERIES.labels(outcome="failed").inc()
    error = sent.error or f"the receiver answered {sent.status}"
    failed = await webhook_queue.settle_failed(claimed, sent.status, error)
    if not failed.settled:
        return "stale"
    if failed.disabled:
        WEBHOOKS_DISABLED.inc()
        log.warning("webhook %d disabled: failing for 24 hours (last: %s)", claimed.webhook_id, error)
        return "disabled"
    log.info(
        "webhook %d delivery %s failed (%s); next try at %s",
        claimed.webhook_id,
        claimed.delivery,
        f"{error}: {sent.cause}" if sent.cause else error,
        failed.retry_at,
    )
    return "failed"


@dataclass(frozen=True)
class RunResult:
    fanned_out: int
    outcomes: dict[str, int]
    backlog: webhook_queue.Backlog

    def summary(self) -> dict[str, int]:  # the outcomes' counts are keyed by outcome ("delivered", "failed", ...)
        return {"fanned_out": self.fanned_out, **self.outcomes, "pending": self.backlog.pending}


async def run(render: Render, *, seconds: float = RUN_SECONDS, lanes: int = LANES) -> RunResult:
    """One delivery run: fan out the new change-feed entries (and make the missing private `finding.embargoed`
    deliveries), then send due deliveries in `lanes` concurrent
    lanes until none is due or `seconds` passed; the gauges are set from what is left."""
    made = await webhook_queue.fan_out()
    made += await webhook_queue.enqueue_embargoed()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    outcomes: Counter[str] = Counter()

    async def lane(claimed: webhook_queue.Claimed | None) -> None:
        while claimed is not None:
            outcomes[await attempt(claimed, render)] += 1
            if loop.time() >= deadline:
                return
            claimed = await webhook_queue.claim_due()

    # one claim first: with nothing due (most runs, rung after every report) the run costs one claim, not `lanes`
    first = await webhook_queue.claim_due()
    try:
        async with asyncio.TaskGroup() as group:
            if first is not None:
                group.create_task(lane(first))
                for _ in range(lanes - 1):  # the other lanes while heads are due (one per webhook at most)
                    claimed = await webhook_queue.claim_due()
                    if claimed is None:
                        break
                    group.create_task(lane(claimed))
    except BaseExceptionGroup as failures:  # one lane's error (a database outage) is the run's
        raise failures.exceptions[0] from None
    left = await webhook_queue.backlog()
    WEBHOOK_PENDING.set(left.pending)
    WEBHOOK_OLDEST_DUE_AGE.set(left.oldest_due_seconds)
    return RunResult(made, dict(outcomes), left)
