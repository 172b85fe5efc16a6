"""The forge, as the rest of Tarakan asks it (docs/forge.md). Each function answers an `Answer`, never raises for
anything the forge or the network does; `deadline` is a `time.monotonic()` instant: a request waits for the shared
per-host rate only until then, and a request that cannot start in time answers `failed` ("rate")."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar
from urllib.parse import urlsplit

from app.forge import adapters, http
from app.forge.types import Answer, CommitInfo, Outcome, RawFile, RepoInfo
from app.kernel.config import evidence_check, forge_max_file_bytes
from app.kernel.metrics import FORGE_REQUESTS

__all__ = [
    "Answer",
    "CommitInfo",
    "Outcome",
    "RawFile",
    "RepoInfo",
    "api_base",
    "commit",
    "evidence_enabled",
    "in_history",
    "raw_file",
    "repository",
]

T = TypeVar("T")
JSON_BYTES = 256 * 1024  # an API answer read at most (a compare's commit and file lists are cut: see read_compare)
_REPOS_PATH = re.compile(r"/repos/([^/]+)/([^/]+?)/?$")
_REPOSITORIES_PATH = re.compile(r"/repositories/(\d+)/?$")


def api_base(host: str) -> str | None:
    """The REST API base Tarakan asks for `host` (app.kernel.config.forge_api_url); None: no forge."""
    found = adapters.api(host)
    return found.base if found else None


def evidence_enabled(host: str) -> bool:
    """Whether findings on `host` are checked at their commit: EVIDENCE_CHECK=gate and the host has a forge
    (tarakan.lol only with FORGE_TARAKAN_URL; else it behaves as `off`)."""
    return evidence_check() == "gate" and api_base(host) is not None


def _count(kind: str, answer: Answer[T]) -> Answer[T]:
    FORGE_REQUESTS.labels(answer.host, kind, answer.outcome).inc()
    return answer


def _trouble(host: str, reply: http.Reply) -> Answer[Any] | None:
    """The answer every request shares: no answer, the forge's fault, or what is nobody's outage (None: a 200)."""
    status = reply.status
    if reply.trouble:
        return Answer(reply.trouble, host, detail=f"{host}: {reply.detail}", status=status)
    if status == 200:
        return None
    if status == 304:
        return Answer("not_modified", host, status=status, etag=reply.headers.get("etag"))
    if status in (404, 410):
        return Answer("missing", host, detail=f"{host} answered {status}", status=status)
    rate = reply.headers.get("x-ratelimit-remaining", "").strip() == "0" or "retry-after" in reply.headers
    if status >= 500 or status == 429 or (status == 403 and rate):
        return Answer("failed", host, detail=f"{host} answered {status}", status=status)
    if 300 <= status < 400:
        return Answer("refused", host, detail=f"{host} answered a redirect ({status}), not followed", status=status)
    return Answer("refused", host, detail=f"{host} answered {status}", status=status)


def _json(reply: http.Reply) -> dict[str, Any]:
    doc = json.loads(reply.body)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def _unreadable(host: str, reply: http.Reply) -> Answer[Any]:
    return Answer("failed", host, detail=f"{host} sent an answer that could not be read", status=reply.status)


async def repository(
    host: str, owner: str, name: str, *, etag: str | None = None, deadline: float | None = None
) -> Answer[RepoInfo]:
    """The repository's metadata. A private repository is `missing` (the public sees it as not found); a 304 to
    `etag` is `not_modified`; a redirect (renamed or transferred) is `refused` with `redirect` = the name it now
    answers for, looked up on our own base when GitHub names only its id (never followed)."""
    forge = adapters.api(host)
    if forge is None:
        return Answer("refused", host, detail=f"{host} has no forge to ask")
    headers = forge.headers()
    if etag:
        headers["If-None-Match"] = etag
    reply = await http.get(
        forge.repository_url(owner, name), bucket=f"{host}:api", deadline=deadline, max_bytes=JSON_BYTES,
        headers=headers,
    )  # fmt: skip
    trouble = _trouble(host, reply)
    if trouble is not None:
        if trouble.outcome == "refused" and 300 <= reply.status < 400:
            redirect = await _redirected(forge, reply.headers.get("location", ""), deadline)
            trouble = Answer("refused", host, detail=trouble.detail, status=reply.status, redirect=redirect)
        return _count("repository", trouble)
    try:
        info = adapters.read_repository(forge.shape, _json(reply))
    except (ValueError, KeyError, TypeError):
        return _count("repository", _unreadable(host, reply))
    if info.private:
        return _count("repository", Answer("missing", host, detail=f"{host}/{owner}/{name} is not public", status=200))
    return _count("repository", Answer("found", host, info, status=200, etag=reply.headers.get("etag")))


async def _redirected(forge: adapters.Api, location: str, deadline: float | None) -> str | None:
    path = urlsplit(location).path
    named = _REPOS_PATH.search(path)
    if named:
        return f"{named.group(1)}/{named.group(2)}"
    by_id = _REPOSITORIES_PATH.search(path)
    url = forge.repository_by_id_url(by_id.group(1)) if by_id else None
    if url is None:
        return None
    reply = await http.get(url, bucket=f"{forge.host}:api", deadline=deadline, max_bytes=JSON_BYTES,
                           headers=forge.headers())  # fmt: skip
    if _trouble(forge.host, reply) is not None:
        _count("repository", Answer("refused" if reply.status else "failed", forge.host))
        return None
    try:
        full_name = str(_json(reply)["full_name"])
    except (ValueError, KeyError, TypeError):
        return None
    _count("repository", Answer("found", forge.host))
    return full_name


async def commit(host: str, owner: str, name: str, ref: str, *, deadline: float | None = None) -> Answer[CommitInfo]:
    """The commit `ref` (a sha, or a branch name: its head), with its committer date; 404 or 422 → `missing`."""
    forge = adapters.api(host)
    if forge is None:
        return Answer("refused", host, detail=f"{host} has no forge to ask")
    url, kind = forge.commit_url(owner, name, ref)
    reply = await http.get(url, bucket=f"{host}:api", deadline=deadline, max_bytes=JSON_BYTES, headers=forge.headers())
    if reply.status == 422:
        return _count(kind, Answer("missing", host, detail=f"{host} has no commit {ref}", status=422))
    trouble = _trouble(host, reply)
    if trouble is not None:
        return _count(kind, trouble)
    try:
        info = adapters.read_commit(forge.shape, kind, _json(reply))
    except (ValueError, KeyError, TypeError):
        return _count(kind, _unreadable(host, reply))
    return _count(kind, Answer("found", host, info, status=200))


async def in_history(
    host: str, owner: str, name: str, branch: str, sha: str, *, deadline: float | None = None
) -> Answer[bool]:
    """Whether commit `sha` is in `branch`'s history (GitHub serves a fork's commits under the parent's name):
    found True or False; `missing` when the forge knows no such commit (or branch)."""
    forge = adapters.api(host)
    if forge is None:
        return Answer("refused", host, detail=f"{host} has no forge to ask")
    reply = await http.get(
        forge.compare_url(owner, name, branch, sha), bucket=f"{host}:api", deadline=deadline, max_bytes=JSON_BYTES,
        headers=forge.headers(),
    )  # fmt: skip
    if reply.status == 422:
        return _count("compare", Answer("missing", host, detail=f"{host} has no commit {sha}", status=422))
    trouble = _trouble(host, reply)
    if trouble is not None and trouble.outcome == "missing" and forge.shape == "forgejo":
        # Forgejo and Gitea before 1.23 compare branches and tags only: the commit's existence stands in (a fork's
        # commits are not served under the parent's name there)
        _count("compare", trouble)
        exists = await commit(host, owner, name, sha, deadline=deadline)
        if exists.outcome != "found":
            return Answer(exists.outcome, host, detail=exists.detail, status=exists.status)
        return Answer("found", host, True, status=exists.status)
    if trouble is not None:
        return _count("compare", trouble)
    try:
        doc = None if reply.truncated else _json(reply)
        found = adapters.read_compare(forge.shape, reply.body, doc, sha)
    except (ValueError, KeyError, TypeError):
        return _count("compare", _unreadable(host, reply))
    return _count("compare", Answer("found", host, found, status=200))


async def raw_file(
    host: str, owner: str, name: str, ref: str, path: str, *, deadline: float | None = None, max_bytes: int = 0
) -> Answer[RawFile]:
    """`path` at `ref` (a sha, a branch, HEAD), at most FORGE_MAX_FILE_BYTES (or `max_bytes`) read: `truncated`
    says there was more; 404 → `missing`. No token goes with it (raw files are served apart from the API)."""
    try:
        url = adapters.raw_url(host, owner, name, path, ref)
    except adapters.NoForge:
        return Answer("refused", host, detail=f"{host} has no forge address to fetch from")
    cap = max_bytes or forge_max_file_bytes()
    reply = await http.get(url, bucket=f"{host}:raw", deadline=deadline, max_bytes=cap, headers={"Accept": "*/*"})
    trouble = _trouble(host, reply)
    if trouble is not None:
        return _count("raw", trouble)
    return _count("raw", Answer("found", host, RawFile(reply.body, reply.truncated), status=200))
