"""Per forge host: its API and raw-file URLs under its own bases, the headers its token goes in, and how its answers
read (docs/forge.md "Adapters"). GitHub; GitLab (`/api/v4`); Forgejo (`/api/v1`: codeberg.org, and tarakan.lol when
FORGE_TARAKAN_URL is set). A setting for one host never serves another's."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote

from app.forge.types import CommitInfo, RepoInfo
from app.kernel.config import TEMPLATE_HOST, forge_api_url, forge_base_url, forge_raw_url_template, forge_token

Shape = Literal["github", "gitlab", "forgejo"]
SHAPES: dict[str, Shape] = {
    "github.com": "github",
    "gitlab.com": "gitlab",
    "codeberg.org": "forgejo",
    TEMPLATE_HOST: "forgejo",
}
HEAD = "HEAD"  # the ref of the default branch in a raw URL
COMMIT = re.compile(r"[0-9a-f]{40}")


class NoForge(Exception):
    """No URL for this host: not a forge host, or tarakan.lol with neither FORGE_TARAKAN_URL nor
    FORGE_RAW_URL_TEMPLATE."""


def _segments(value: str) -> str:
    return "/".join(quote(segment, safe="") for segment in value.split("/"))


def _q(value: str) -> str:
    return quote(value, safe="")


def _repo(owner: str, name: str) -> str:
    return f"{_q(owner)}/{_q(name)}"


def _base(host: str) -> str:
    base = forge_base_url(host)
    if base is None:
        raise NoForge(host)
    return base


# Raw files: one function per host, at `ref` (a branch name, HEAD, or a commit sha) under the host's own base (the
# base's path is kept: no urljoin). GitHub and GitLab resolve `HEAD` in the ref position; Forgejo resolves the branch
# name `HEAD` to the default branch when no branch has that name (its legacy `/raw/{path}` form redirects, which is
# never followed).


def github_raw_url(owner: str, name: str, ref: str, path: str) -> str:
    return f"{_base('github.com')}/{_repo(owner, name)}/{_q(ref)}/{_segments(path)}"


def gitlab_raw_url(owner: str, name: str, ref: str, path: str) -> str:
    return f"{_base('gitlab.com')}/{_repo(owner, name)}/-/raw/{_q(ref)}/{_segments(path)}"


def _forgejo_raw_url(base: str, owner: str, name: str, ref: str, path: str) -> str:
    kind = "commit" if COMMIT.fullmatch(ref) else "branch"
    return f"{base}/{_repo(owner, name)}/raw/{kind}/{_q(ref)}/{_segments(path)}"


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
        {"host": _q(TEMPLATE_HOST), "owner": _q(owner), "name": _q(name), "path": _segments(path)}
    )


RAW_URLS: dict[str, Callable[[str, str, str, str], str]] = {
    "github.com": github_raw_url,
    "gitlab.com": gitlab_raw_url,
    "codeberg.org": codeberg_raw_url,
    TEMPLATE_HOST: tarakan_raw_url,
}


def raw_url(host: str, owner: str, name: str, path: str, ref: str = HEAD) -> str:
    """`path` at `ref` of host/owner/name; every value percent-encoded per path segment (the slashes of `path`
    stay). NoForge for a host without one."""
    build = RAW_URLS.get(host)
    if build is None:
        raise NoForge(host)
    return build(owner, name, ref, path)


# The API


@dataclass(frozen=True)
class Api:
    host: str
    shape: Shape
    base: str

    def headers(self) -> dict[str, str]:
        """What every API request sends; the host's token only here, to the host's own API base."""
        token = forge_token(self.host)
        if self.shape == "github":
            sent = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
            if token:
                sent["Authorization"] = f"Bearer {token}"
        elif self.shape == "gitlab":
            sent = {"Accept": "application/json"}
            if token:
                sent["PRIVATE-TOKEN"] = token
        else:
            sent = {"Accept": "application/json"}
            if token:
                sent["Authorization"] = f"token {token}"
        return sent

    def _project(self, owner: str, name: str) -> str:
        if self.shape == "gitlab":
            return f"{self.base}/projects/{_q(owner + '/' + name)}"
        return f"{self.base}/repos/{_repo(owner, name)}"

    def repository_url(self, owner: str, name: str) -> str:
        return self._project(owner, name)

    def repository_by_id_url(self, forge_id: str) -> str | None:
        """GitHub's answer for a renamed repository redirects to `/repositories/{id}`: asked on our own base."""
        return f"{self.base}/repositories/{_q(forge_id)}" if self.shape == "github" else None

    def commit_url(self, owner: str, name: str, ref: str) -> tuple[str, str]:
        """(url, kind): a commit by sha, or a branch's head by name."""
        kind = "commit" if COMMIT.fullmatch(ref) else "branch"
        project = self._project(owner, name)
        if self.shape == "github":
            return f"{project}/commits/{_q(ref)}", kind
        if self.shape == "gitlab":
            return f"{project}/repository/commits/{_q(ref)}", kind
        if kind == "commit":
            return f"{project}/git/commits/{_q(ref)}", kind
        return f"{project}/branches/{_q(ref)}", kind

    def compare_url(self, owner: str, name: str, branch: str, sha: str) -> str:
        project = self._project(owner, name)
        if self.shape == "github":
            return f"{project}/compare/{_q(branch)}...{_q(sha)}?per_page=1"
        if self.shape == "gitlab":
            return f"{project}/repository/merge_base?refs%5B%5D={_q(sha)}&refs%5B%5D={_q(branch)}"
        return f"{project}/compare/{_q(branch)}...{_q(sha)}"


def api(host: str) -> Api | None:
    shape = SHAPES.get(host)
    base = forge_api_url(host)
    return Api(host, shape, base) if shape is not None and base is not None else None


# Answers (ValueError/KeyError/TypeError: an answer we cannot read, the caller's `failed`)


def _when(raw: Any) -> datetime | None:
    if not isinstance(raw, str) or not raw:
        return None
    return datetime.fromisoformat(raw.replace("Z", "+00:00"))


def _text(raw: Any) -> str | None:
    return raw if isinstance(raw, str) and raw else None


def read_repository(shape: Shape, doc: dict[str, Any]) -> RepoInfo:
    if shape == "gitlab":
        return RepoInfo(
            forge_id=str(int(doc["id"])),
            full_name=str(doc["path_with_namespace"]),
            default_branch=str(doc.get("default_branch") or "main"),
            description=_text(doc.get("description")),
            language=None,
            stars=int(doc.get("star_count") or 0),
            private=doc.get("visibility", "public") != "public",
            archived=bool(doc.get("archived")),
        )
    return RepoInfo(
        forge_id=str(int(doc["id"])),
        full_name=str(doc["full_name"]),
        default_branch=str(doc.get("default_branch") or "main"),
        description=_text(doc.get("description")),
        language=_text(doc.get("language")),
        stars=int(doc.get("stargazers_count" if shape == "github" else "stars_count") or 0),
        private=bool(doc.get("private")),
        archived=bool(doc.get("archived")),
    )


def read_commit(shape: Shape, kind: str, doc: dict[str, Any]) -> CommitInfo:
    if shape == "github":
        return CommitInfo(str(doc["sha"]), _when(doc["commit"]["committer"]["date"]))
    if shape == "gitlab":
        return CommitInfo(str(doc["id"]), _when(doc.get("committed_date")))
    if kind == "branch":
        return CommitInfo(str(doc["commit"]["id"]), _when(doc["commit"].get("timestamp")))
    return CommitInfo(str(doc["sha"]), _when(doc.get("created")))


_STATUS = re.compile(rb'"status"\s*:\s*"([a-z]+)"')


def read_compare(shape: Shape, body: bytes, doc: dict[str, Any] | None, sha: str) -> bool:
    """Whether `sha` is in the branch's history. GitHub: `identical` or `behind` (a truncated answer: its first
    "status", the top-level one, comes before the commit and file lists); GitLab: the merge base is `sha` itself;
    Forgejo: no commit of `sha` is missing from the branch."""
    if shape == "github":
        if doc is None:
            found = _STATUS.search(body)
            if found is None:
                raise ValueError("no status in the compare answer")
            return found.group(1) in (b"identical", b"behind")
        return doc["status"] in ("identical", "behind")
    if doc is None:
        raise ValueError("a truncated compare answer")
    if shape == "gitlab":
        return str(doc["id"]) == sha
    return int(doc["total_commits"]) == 0
