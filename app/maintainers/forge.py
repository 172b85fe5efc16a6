"""A maintainer's verification file from the forge, bounded every way (docs/security.md "Forge fetch", on the
shared layer of app.forge): the file's text, the file missing, or the forge failing (a 503, never an ended
maintainership)."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from app.forge import adapters, http
from app.forge.adapters import HEAD, NoForge

__all__ = ["HEAD", "Fetched", "NoForge", "fetch", "fetch_verify_file", "raw_url", "user_fetch_slot"]

VERIFY_PATH = ".tarakan/verify.txt"
MAX_BYTES = 4096
READ_SECONDS = 5.0
DEADLINE_SECONDS = 10.0  # the whole fetch: a forge dripping one byte per read timeout still ends here
RETRY_AFTER = 60  # what a caller is told to wait after the forge failed

USER_FETCHES = 4  # forge fetches users' verifications may have in flight at once in one process; beyond: a 503


@dataclass(frozen=True)
class Fetched:
    """What the forge answered: `found` with the text read, `missing` (404 or 410: the file is not there),
    `refused` (another answer the maintainer can fix: a redirect, 401, 403, ...) or `failed` (5xx, 429, a 403 with
    the forge's rate-limit headers, timeout, DNS, connection: the forge's fault)."""

    outcome: Literal["found", "missing", "refused", "failed"]
    forge: str  # the host that was asked (named in errors)
    detail: str = ""
    text: str = ""
    status: int = 0  # the forge's HTTP status; 0: no answer (or refused before asking)

    @property
    def unreachable(self) -> bool:
        """The forge answered but will not give the file (a redirect, 401, a 403 that is not its rate limit, ...):
        the maintainer's to fix; persisting, it ends a maintainership (proof_unreachable)."""
        return self.outcome == "refused" and self.status != 0

    def holds(self, token: str) -> bool:
        """Whether one line of the file, stripped, is `token` (every line compared, each in constant time)."""
        if self.outcome != "found":
            return False
        wanted = token.encode()
        matched = False
        for line in self.text.splitlines():
            matched |= hmac.compare_digest(line.strip().encode(), wanted)
        return matched


def raw_url(host: str, owner: str, name: str, path: str = VERIFY_PATH, ref: str = HEAD) -> str:
    """The URL of `path` at `ref` of host/owner/name, built by that host's own function from that host's own
    setting (app.forge.adapters): a setting for one host never serves another's."""
    # a configuration error (a bad base) is the operator's, refused at start: here it raises like any other
    return adapters.raw_url(host, owner, name, path, ref)


_in_flight = 0


@contextmanager
def user_fetch_slot() -> Iterator[bool]:
    """One of USER_FETCHES slots for a fetch a user asked for (True), or False when all are taken: the caller answers
    503 at once rather than queueing (a flood of verifies must not become a flood of forge requests). One event
    loop per process and no await between the test and the count, so a plain counter is the semaphore."""
    global _in_flight
    if _in_flight >= USER_FETCHES:
        yield False
        return
    _in_flight += 1
    try:
        yield True
    finally:
        _in_flight -= 1


async def fetch(url: str, *, bucket: str = "") -> Fetched:
    """GET `url` under the bounds of the module docstring, on the forge's shared HTTP layer (app.forge.http: its
    per-host rate, the forge's "stop until", no private address)."""
    forge = urlsplit(url).hostname or "the forge"
    reply = await http.get(
        url, bucket=bucket or f"{forge}:raw", deadline=None, max_bytes=MAX_BYTES,
        headers={"Accept": "text/plain"}, read_seconds=READ_SECONDS, max_seconds=DEADLINE_SECONDS,
    )  # fmt: skip
    status = reply.status
    if reply.trouble == "refused":
        detail = "the forge URL must be https" if "https" in reply.detail else reply.detail
        return Fetched("refused", forge, detail, status=status)
    if reply.trouble == "failed":
        return Fetched(
            "failed",
            forge,
            reply.detail.replace("a compressed answer", "the forge sent a compressed answer"),
            status=status,
        )
    if status in (404, 410):
        return Fetched("missing", forge, f"the forge answered {status}", status=status)
    rate_headers = reply.headers.get("x-ratelimit-remaining", "").strip() == "0" or "retry-after" in reply.headers
    if status >= 500 or status == 429 or (status == 403 and rate_headers):
        return Fetched("failed", forge, f"the forge answered {status}", status=status)
    if 300 <= status < 400:
        detail = f"the forge answered with a redirect ({status}), which is not followed"
        return Fetched("refused", forge, detail, status=status)
    if status != 200:
        return Fetched("refused", forge, f"the forge answered {status}", status=status)
    return Fetched("found", forge, text=reply.body.decode("utf-8", errors="replace"), status=status)


async def fetch_verify_file(host: str, owner: str, name: str) -> Fetched:
    """The verification file of host/owner/name (`VERIFY_PATH` at its default branch, `HEAD`)."""
    try:
        url = raw_url(host, owner, name)
    except adapters.NoForge:
        return Fetched("refused", host, f"{host} has no forge address to fetch from (FORGE_TARAKAN_URL is not set)")
    return await fetch(url, bucket=f"{host}:raw")
