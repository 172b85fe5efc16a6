"""The one fetch Tarakan makes from a forge, a maintainer's verification file, bounded every way (docs/security.md
"Forge fetch"): the file's text, the file missing, or the forge failing (a 503, never an ended maintainership)."""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, urlsplit

import httpx

from app.kernel.config import TEMPLATE_HOST, forge_base_url, forge_raw_url_template, is_loopback_host

VERIFY_PATH = ".tarakan/verify.txt"
MAX_BYTES = 4096
CONNECT_SECONDS = 3.0
READ_SECONDS = 5.0
DEADLINE_SECONDS = 10.0  # the whole fetch: a forge dripping one byte per read timeout still ends here
RETRY_AFTER = 60  # what a caller is told to wait after the forge failed

HEAD = "HEAD"  # the ref of a claim: the default branch
USER_FETCHES = 4  # forge fetches users' verifications may have in flight at once in one process; beyond: a 503
_COMMIT = re.compile(r"[0-9a-f]{40}")


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


class NoForge(Exception):
    """No URL for this host: not a forge host, or tarakan.lol with neither FORGE_TARAKAN_URL nor
    FORGE_RAW_URL_TEMPLATE."""


def _segments(value: str) -> str:
    return "/".join(quote(segment, safe="") for segment in value.split("/"))


def _base(host: str) -> str:
    base = forge_base_url(host)
    if base is None:
        raise NoForge(host)
    return base


def _repo(owner: str, name: str) -> str:
    return f"{quote(owner, safe='')}/{quote(name, safe='')}"


# One function per forge host: its raw file URL at `ref` (a branch name, HEAD, or a commit sha) under its own base
# (app.kernel.config.forge_base_url; the base's path is kept: no urljoin). GitHub and GitLab resolve `HEAD` in the
# ref position; Forgejo (Codeberg, tarakan.lol) resolves the branch name `HEAD` to the default branch when no
# branch has that name (its legacy `/raw/{path}` form answers with a redirect, which is never followed).


def github_raw_url(owner: str, name: str, ref: str, path: str) -> str:
    return f"{_base('github.com')}/{_repo(owner, name)}/{quote(ref, safe='')}/{_segments(path)}"


def gitlab_raw_url(owner: str, name: str, ref: str, path: str) -> str:
    return f"{_base('gitlab.com')}/{_repo(owner, name)}/-/raw/{quote(ref, safe='')}/{_segments(path)}"


def _forgejo_raw_url(base: str, owner: str, name: str, ref: str, path: str) -> str:
    kind = "commit" if _COMMIT.fullmatch(ref) else "branch"
    return f"{base}/{_repo(owner, name)}/raw/{kind}/{quote(ref, safe='')}/{_segments(path)}"


def codeberg_raw_url(owner: str, name: str, ref: str, path: str) -> str:
    return _forgejo_raw_url(_base("codeberg.org"), owner, name, ref, path)


def tarakan_raw_url(owner: str, name: str, ref: str, path: str) -> str:
    """FORGE_TARAKAN_URL (Forgejo-shaped), else FORGE_RAW_URL_TEMPLATE (which names no ref: the default branch)."""
    base = forge_base_url(TEMPLATE_HOST)
    if base is not None:
        return _forgejo_raw_url(base, owner, name, ref, path)
    template = forge_raw_url_template()
    if template is None or ref != HEAD:
        raise NoForge(TEMPLATE_HOST)
    return template.format_map(
        {"host": quote(TEMPLATE_HOST, safe=""), "owner": quote(owner, safe=""), "name": quote(name, safe=""),
         "path": _segments(path)}
    )  # fmt: skip


RAW_URLS: dict[str, Callable[[str, str, str, str], str]] = {
    "github.com": github_raw_url,
    "gitlab.com": gitlab_raw_url,
    "codeberg.org": codeberg_raw_url,
    TEMPLATE_HOST: tarakan_raw_url,
}


def raw_url(host: str, owner: str, name: str, path: str = VERIFY_PATH, ref: str = HEAD) -> str:
    """The URL of `path` at `ref` of host/owner/name, built by that host's own function from that host's own
    setting: a setting for one host never serves another's. Every value is percent-encoded per path segment (the
    slashes of `path` stay)."""
    build = RAW_URLS.get(host)
    if build is None:
        raise NoForge(host)
    # a configuration error (a bad base) is the operator's, refused at start: here it raises like any other
    return build(owner, name, ref, path)


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


def _rate_limited(response: httpx.Response) -> bool:
    """The forge's own rate limit (a 403 GitHub sends, or a 429): its quota headers say so."""
    headers = response.headers
    return headers.get("x-ratelimit-remaining", "").strip() == "0" or "retry-after" in headers


async def fetch(url: str) -> Fetched:
    """GET `url` under the bounds of the module docstring."""
    parts = urlsplit(url)
    forge = parts.hostname or "the forge"
    if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback_host(forge)):
        return Fetched("refused", forge, "the forge URL must be https")
    timeout = httpx.Timeout(connect=CONNECT_SECONDS, read=READ_SECONDS, write=READ_SECONDS, pool=CONNECT_SECONDS)
    try:
        async with (
            asyncio.timeout(DEADLINE_SECONDS),
            httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=timeout) as client,
            client.stream("GET", url, headers={"Accept-Encoding": "identity", "Accept": "text/plain"}) as response,
        ):
            status = response.status_code
            if status in (404, 410):
                return Fetched("missing", forge, f"the forge answered {status}", status=status)
            if status >= 500 or status == 429 or (status == 403 and _rate_limited(response)):
                return Fetched("failed", forge, f"the forge answered {status}", status=status)
            if 300 <= status < 400:
                detail = f"the forge answered with a redirect ({status}), which is not followed"
                return Fetched("refused", forge, detail, status=status)
            if status != 200:
                return Fetched("refused", forge, f"the forge answered {status}", status=status)
            if response.headers.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
                return Fetched("failed", forge, "the forge sent a compressed answer")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) >= MAX_BYTES:
                    break  # leaving the block closes the connection: nothing past MAX_BYTES is read
            return Fetched(
                "found", forge, text=bytes(body[:MAX_BYTES]).decode("utf-8", errors="replace"), status=status
            )
    except (TimeoutError, httpx.HTTPError, OSError) as exc:
        return Fetched("failed", forge, _failure(exc))


def _failure(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "the forge did not answer in time"
    if isinstance(exc, httpx.ConnectError):
        return "the forge could not be reached (DNS or connection)"
    return "the forge's answer broke off"


async def fetch_verify_file(host: str, owner: str, name: str) -> Fetched:
    """The verification file of host/owner/name (`VERIFY_PATH` at its default branch, `HEAD`)."""
    try:
        url = raw_url(host, owner, name)
    except NoForge:
        return Fetched("refused", host, f"{host} has no forge address to fetch from (FORGE_TARAKAN_URL is not set)")
    return await fetch(url)
