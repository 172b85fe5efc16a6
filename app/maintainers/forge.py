"""The one fetch Tarakan makes from a forge, a maintainer's verification file, bounded every way (docs/security.md
"Forge fetch"): the file's text, the file missing, or the forge failing (a 503, never an ended maintainership)."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, urlsplit

import httpx

from app.kernel.config import forge_raw_url_template

VERIFY_PATH = ".tarakan/verify.txt"
MAX_BYTES = 4096
CONNECT_SECONDS = 3.0
READ_SECONDS = 5.0
DEADLINE_SECONDS = 10.0  # the whole fetch: a forge dripping one byte per read timeout still ends here
RETRY_AFTER = 60  # what a caller is told to wait after the forge failed

# Each forge's raw file at the default branch (HEAD). GitHub and GitLab resolve `HEAD` in the ref position; Forgejo
# (Codeberg) and Gitea resolve the branch name `HEAD` to the default branch when no branch has that name (their
# legacy `/raw/{path}` form answers with a redirect, which is never followed). tarakan.lol: its forge is out of
# scope, so no default (claims there need FORGE_RAW_URL_TEMPLATE).
DEFAULT_TEMPLATES = {
    "github.com": "https://raw.githubusercontent.com/{owner}/{name}/HEAD/{path}",
    "gitlab.com": "https://gitlab.com/{owner}/{name}/-/raw/HEAD/{path}",
    "codeberg.org": "https://codeberg.org/{owner}/{name}/raw/branch/HEAD/{path}",
}


@dataclass(frozen=True)
class Fetched:
    """What the forge answered: `found` with the text read, `missing` (404 or 410: the file is not there),
    `refused` (another answer the maintainer can fix: a redirect, 401, 403, ...) or `failed` (5xx, 429,
    timeout, DNS, connection: the forge's fault)."""

    outcome: Literal["found", "missing", "refused", "failed"]
    forge: str  # the host that was asked (named in errors)
    detail: str = ""
    text: str = ""

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
    """No URL for this host: no default and no FORGE_RAW_URL_TEMPLATE."""


def _segments(value: str) -> str:
    return "/".join(quote(segment, safe="") for segment in value.split("/"))


def raw_url(host: str, owner: str, name: str, path: str = VERIFY_PATH) -> str:
    """The URL of `path` at the default branch of host/owner/name: FORGE_RAW_URL_TEMPLATE, else the host's default.
    Every value is percent-encoded per path segment (the slashes of `path` stay)."""
    template = forge_raw_url_template() or DEFAULT_TEMPLATES.get(host)
    if template is None:
        raise NoForge(host)
    return template.format_map(
        {
            "host": quote(host, safe=""),
            "owner": quote(owner, safe=""),
            "name": quote(name, safe=""),
            "path": _segments(path),
        }
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def fetch(url: str) -> Fetched:
    """GET `url` under the bounds of the module docstring."""
    parts = urlsplit(url)
    forge = parts.hostname or "the forge"
    if parts.scheme != "https" and not (parts.scheme == "http" and _loopback(forge)):
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
                return Fetched("missing", forge, f"the forge answered {status}")
            if status >= 500 or status == 429:
                return Fetched("failed", forge, f"the forge answered {status}")
            if 300 <= status < 400:
                return Fetched(
                    "refused", forge, f"the forge answered with a redirect ({status}), which is not followed"
                )
            if status != 200:
                return Fetched("refused", forge, f"the forge answered {status}")
            if response.headers.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
                return Fetched("failed", forge, "the forge sent a compressed answer")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) >= MAX_BYTES:
                    break  # leaving the block closes the connection: nothing past MAX_BYTES is read
            return Fetched("found", forge, text=bytes(body[:MAX_BYTES]).decode("utf-8", errors="replace"))
    except (TimeoutError, httpx.HTTPError, OSError) as exc:
        return Fetched("failed", forge, _failure(exc))


def _failure(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "the forge did not answer in time"
    if isinstance(exc, httpx.ConnectError):
        return "the forge could not be reached (DNS or connection)"
    return "the forge's answer broke off"


async def fetch_verify_file(host: str, owner: str, name: str) -> Fetched:
    """The verification file of host/owner/name (`VERIFY_PATH` at its default branch)."""
    try:
        url = raw_url(host, owner, name)
    except NoForge:
        return Fetched(
            "refused", host, f"{host} has no forge address to fetch from (FORGE_RAW_URL_TEMPLATE is not set)"
        )
    return await fetch(url)
