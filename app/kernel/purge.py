"""The shared page cache's purge client: every Varnish in `VARNISH_PURGE_URLS` drops the pages tagged with what a
takedown or a rollup refresh changed (docs/scaling.md "Shared cache"). Unset: no shared cache, nothing is sent."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from app.kernel.aftercommit import after_commit
from app.kernel.config import varnish_purge_timeout, varnish_purge_urls
from app.kernel.metrics import CACHE_PURGE_FAILURES

log = logging.getLogger(__name__)

PURGE_HEADER = "xkey-purge"  # deploy/varnish/default.vcl: PURGE with the space-separated tags
EVERYTHING = "BAN"  # deploy/varnish/default.vcl: BAN drops every object (ban("obj.status != 0"))
ATTEMPTS = 3  # tries of the tagged purge, then of the fallback's ...
FALLBACK_ATTEMPTS = 2
PAUSES = (0.05, 0.2)  # ... with these pauses between tries: a takedown waits at most ~5 timeouts
# tags per PURGE request: Varnish refuses a request header over http_req_hdr_len (8 KiB by default)
MAX_TAG_BYTES = 4000

# the outcomes of the purges run while a `collect()` block is open (the moderator's answer reports them)
_collected: ContextVar[list[PurgeOutcome] | None] = ContextVar("purge_outcomes", default=None)


@dataclass(frozen=True)
class PurgeOutcome:
    """One purge over every configured cache: which ones fell back to purging everything, and which failed even so."""

    caches: int
    tags: int
    fell_back: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """`purged`, `fell_back` (somewhere everything was purged instead of the tags) or `failed` (somewhere not even
        that worked)."""
        return "failed" if self.failed else "fell_back" if self.fell_back else "purged"

    def notice(self) -> str:
        """One sentence for the moderator (console and CLI)."""
        caches = self.failed or self.fell_back
        where = f" on {len(caches)} of {self.caches} cache(s) ({', '.join(caches)})" if caches else ""
        return STATE_NOTICES[self.state].format(where=where)


# What the moderator is told; `where` names the caches (the no-JS console's redirect carries only the state)
STATE_NOTICES = {
    "purged": "Shared cache: the pages showing it were purged.",
    "fell_back": "Shared cache: the tagged purge failed{where}, so everything there was purged instead.",
    "failed": (
        "Shared cache: the purge failed{where}, even when purging everything: the old pages may be served there "
        "until their s-maxage runs out (at most 5 minutes). Operators are alerted (TarakanCachePurgeFailed)."
    ),
}


@contextlib.contextmanager
def collect() -> Iterator[list[PurgeOutcome]]:
    """Gather the outcomes of the purges that run inside the block (queued by `purge_after_commit`), for the answer."""
    outcomes: list[PurgeOutcome] = []
    token = _collected.set(outcomes)
    try:
        yield outcomes
    finally:
        _collected.reset(token)


def worst_state(outcomes: Iterable[PurgeOutcome]) -> str | None:
    """The worst state of `outcomes` (None when nothing was purged: no shared cache configured)."""
    states = {o.state for o in outcomes}
    return next((state for state in ("failed", "fell_back", "purged") if state in states), None)


def notice(outcomes: Iterable[PurgeOutcome]) -> str | None:
    """What the moderator is told about the shared cache: the worst outcome; None without a shared cache."""
    found = list(outcomes)
    state = worst_state(found)
    return next(o.notice() for o in found if o.state == state) if state else None


def purge_after_commit(tags: Iterable[str] | None) -> None:
    """Purge `tags` (None: everything) from every shared cache once the enclosing transaction commits, before the
    caller's answer (the step runs inside `db.transaction()`'s exit). Without `VARNISH_PURGE_URLS`, nothing."""
    if not varnish_purge_urls():
        return
    wanted = None if tags is None else frozenset(tags)
    if wanted is not None and not wanted:
        return  # nothing shown anywhere changed (e.g. an account that recorded no checks)
    sink = _collected.get()  # captured now: the step may run in a copy of this context

    async def purge_step() -> None:
        outcome = await purge_everything() if wanted is None else await purge(wanted)
        if sink is not None:
            sink.append(outcome)

    after_commit(purge_step)


async def purge(tags: Iterable[str]) -> PurgeOutcome:
    """Purge `tags` from every configured cache, in parallel: each tries `ATTEMPTS` times, then falls back to purging
    everything; failures are counted (`tarakan_cache_purge_failures_total`) and logged. Never raises."""
    return await _purge_all(sorted(set(tags)))


async def purge_everything() -> PurgeOutcome:
    """Drop every object of every configured cache (an action whose pages cannot be named)."""
    return await _purge_all(None)


async def _purge_all(tags: list[str] | None) -> PurgeOutcome:
    urls = varnish_purge_urls()
    if not urls or tags == []:
        return PurgeOutcome(caches=len(urls), tags=0)
    timeout = varnish_purge_timeout()
    # no TLS context for plain http: building httpx's default one costs ~10-250 ms a client (its CA bundle)
    tls: ssl.SSLContext | bool = _tls() if any(url.startswith("https:") for url in urls) else False
    async with httpx.AsyncClient(timeout=timeout, trust_env=False, verify=tls) as client:
        results = await asyncio.gather(*(_purge_one(client, url, tags) for url in urls))
    shown = [_shown(url) for url in urls]
    return PurgeOutcome(
        caches=len(urls),
        tags=len(tags) if tags is not None else 0,
        fell_back=tuple(name for name, result in zip(shown, results, strict=True) if result == "fell_back"),
        failed=tuple(name for name, result in zip(shown, results, strict=True) if result == "failed"),
    )


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def _shown(url: str) -> str:
    """host:port only: a URL's credentials never reach a log line or the moderator's page."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


def _chunks(tags: list[str]) -> list[str]:
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for tag in tags:
        if current and size + len(tag) + 1 > MAX_TAG_BYTES:
            chunks.append(" ".join(current))
            current, size = [], 0
        current.append(tag)
        size += len(tag) + 1
    if current:
        chunks.append(" ".join(current))
    return chunks


async def _purge_one(client: httpx.AsyncClient, url: str, tags: list[str] | None) -> str:
    """On one cache: `purged`, `fell_back` (the tags failed, everything was purged) or `failed` (both failed)."""
    if tags is not None:
        requests = [{PURGE_HEADER: chunk} for chunk in _chunks(tags)]
        if await _send(client, "PURGE", url, requests, ATTEMPTS):
            return "purged"
        CACHE_PURGE_FAILURES.labels(stage="tags").inc()
    if await _send(client, EVERYTHING, url, [{}], FALLBACK_ATTEMPTS):
        if tags is not None:
            log.warning("shared cache %s: the tagged purge failed; everything was purged instead", _shown(url))
        return "purged" if tags is None else "fell_back"
    CACHE_PURGE_FAILURES.labels(stage="everything").inc()
    log.error("shared cache %s: purging everything failed too; it may serve taken-down pages", _shown(url))
    return "failed"


async def _send(client: httpx.AsyncClient, method: str, url: str, requests: list[dict[str, str]], tries: int) -> bool:
    """Send each request in turn (a retry resumes at the one that failed); True when all were answered 200."""
    done = 0
    for attempt in range(tries):
        try:
            while done < len(requests):
                answer = await client.request(method, url + "/", headers=requests[done])
                if answer.status_code != 200:
                    raise httpx.HTTPStatusError(
                        f"answered {answer.status_code}", request=answer.request, response=answer
                    )
                done += 1
            return True
        except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:  # a failed try, never an error
            log.warning("shared cache %s: %s failed (try %d of %d): %s", _shown(url), method, attempt + 1, tries, exc)
            if attempt + 1 < tries:
                await asyncio.sleep(PAUSES[min(attempt, len(PAUSES) - 1)])
    return False
