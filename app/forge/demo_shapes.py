"""The demo forge's answers in each forge's own shapes (app.forge.demo): GitHub under `/github.com/api` and
`/github.com/raw`, GitLab's `/api/v4` and `-/raw`, Forgejo's `/api/v1` and `raw/{commit|branch}`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass
class Commit:
    sha: str
    files: dict[str, bytes]
    committed_at: datetime


@dataclass
class Repo:
    host: str
    owner: str
    name: str
    default_branch: str
    forge_id: int
    description: str | None = None
    language: str | None = None
    stars: int = 0
    private: bool = False
    archived: bool = False
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, list[str]] = field(default_factory=dict)  # branch -> its history, oldest first
    renamed_to: tuple[str, str] | None = None


class DemoForge(Protocol):
    """What the shapes read of the demo forge (app/forge/demo.py)."""

    repos: dict[tuple[str, str, str], Repo]
    old_compare: set[str]


_HEX = re.compile(r"[0-9a-f]{7,40}")  # a commit id, whole or abbreviated

NOT_FOUND: tuple[int, Any, dict[str, str]] = (404, {"message": "Not Found"}, {})
Reply = tuple[int, Any, dict[str, str]]


def _stamp(commit: Commit) -> str:
    return commit.committed_at.isoformat().replace("+00:00", "Z")


def _find(forge: DemoForge, host: str, owner: str, name: str) -> Repo | None:
    return forge.repos.get((host, owner.lower(), name.lower()))


def _visible(repo: Repo, headers: dict[str, str]) -> bool:
    # a private repository is not found by anonymous callers (GitHub's answer); with a token, it says private
    return not repo.private or "authorization" in headers or "private-token" in headers


def _resolve(repo: Repo, ref: str) -> Commit | None:
    if ref == "HEAD":
        ref = repo.default_branch
    history = repo.branches.get(ref)
    if history is not None:
        return repo.commits.get(history[-1]) if history else None
    return repo.commits.get(ref)


def _malformed(repo: Repo, ref: str) -> bool:
    return ref != "HEAD" and ref not in repo.branches and not _HEX.fullmatch(ref)


def _raw(repo: Repo, ref: str, path: str) -> Reply:
    commit = _resolve(repo, ref)
    if commit is None or path not in commit.files:
        return 404, b"404: Not Found", {}
    return 200, commit.files[path], {}


def answer(forge: DemoForge, host: str, path: list[str], query: dict[str, list[str]], headers: dict[str, str]) -> Reply:
    if host == "github.com":
        return _github(forge, path, headers)
    if host == "gitlab.com":
        return _gitlab(forge, path, query, headers)
    return _forgejo(forge, host, path, headers)


def _github_repo(repo: Repo) -> dict[str, Any]:
    return {
        "id": repo.forge_id, "name": repo.name, "full_name": f"{repo.owner}/{repo.name}",
        "owner": {"login": repo.owner}, "default_branch": repo.default_branch, "description": repo.description,
        "language": repo.language, "stargazers_count": repo.stars, "private": repo.private,
        "visibility": "private" if repo.private else "public", "archived": repo.archived,
    }  # fmt: skip


def _github(forge: DemoForge, path: list[str], headers: dict[str, str]) -> Reply:
    if path[:1] == ["raw"] and len(path) >= 5:
        repo = _find(forge, "github.com", path[1], path[2])
        if repo is None or repo.private:
            return 404, b"404: Not Found", {}
        return _raw(repo, path[3], "/".join(path[4:]))
    if path[:2] == ["api", "repositories"] and len(path) == 3:
        by_id = [r for r in forge.repos.values() if str(r.forge_id) == path[2] and r.renamed_to is None]
        return (200, _github_repo(by_id[0]), {}) if by_id else NOT_FOUND
    if path[:2] != ["api", "repos"] or len(path) < 4:
        return NOT_FOUND
    repo = _find(forge, "github.com", path[2], path[3])
    if repo is None or not _visible(repo, headers):
        return NOT_FOUND
    rest = path[4:]
    if repo.renamed_to is not None:
        moved = f"{path[0]}/repositories/{repo.forge_id}"
        return 301, {"message": "Moved Permanently", "url": moved}, {"Location": f"/github.com/{moved}"}
    if not rest:
        return 200, _github_repo(repo), {}
    if rest[0] == "commits" and len(rest) == 2:
        commit = _resolve(repo, rest[1])
        if commit is None:
            code = 422 if _malformed(repo, rest[1]) else 404
            return code, {"message": "No commit found for SHA: " + rest[1]}, {}
        stamp = {"name": "dev", "date": _stamp(commit)}
        return 200, {"sha": commit.sha, "commit": {"committer": stamp, "author": stamp, "message": "demo"}}, {}
    if rest[0] == "compare" and len(rest) == 2 and "..." in rest[1]:
        base, head = rest[1].split("...", 1)
        history = repo.branches.get(base)
        if history is None or head not in repo.commits:
            return NOT_FOUND
        if history and head == history[-1]:
            status = "identical"
        elif head in history:
            status = "behind"
        else:
            status = "diverged"
        behind = len(history) - 1 - history.index(head) if head in history else 0
        return 200, {"status": status, "ahead_by": int(status == "diverged"), "behind_by": behind,
                     "commits": [], "files": []}, {}  # fmt: skip
    return NOT_FOUND


def _gitlab(forge: DemoForge, path: list[str], query: dict[str, list[str]], headers: dict[str, str]) -> Reply:
    if len(path) >= 6 and path[2:4] == ["-", "raw"]:
        repo = _find(forge, "gitlab.com", path[0], path[1])
        return _raw(repo, path[4], "/".join(path[5:])) if repo and not repo.private else (404, b"Not Found", {})
    if path[:3] != ["api", "v4", "projects"] or len(path) < 4 or "/" not in path[3]:
        return NOT_FOUND
    owner, name = path[3].split("/", 1)
    repo = _find(forge, "gitlab.com", owner, name)
    if repo is None or not _visible(repo, headers):
        return NOT_FOUND
    rest = path[4:]
    if not rest:
        return 200, {
            "id": repo.forge_id, "path_with_namespace": f"{repo.owner}/{repo.name}",
            "default_branch": repo.default_branch, "description": repo.description, "star_count": repo.stars,
            "visibility": "private" if repo.private else "public", "archived": repo.archived,
        }, {}  # fmt: skip
    if rest[:2] == ["repository", "commits"] and len(rest) == 3:
        commit = _resolve(repo, rest[2])
        if commit is None:
            return NOT_FOUND
        return 200, {"id": commit.sha, "short_id": commit.sha[:8], "committed_date": _stamp(commit)}, {}
    if rest == ["repository", "merge_base"]:
        refs = query.get("refs[]", [])
        commits = [_resolve(repo, ref) for ref in refs]
        if len(refs) != 2 or None in commits:
            return NOT_FOUND
        sha, branch = refs
        history = repo.branches.get(branch, [])
        base = sha if sha in history else (history[0] if history else None)
        return (200, {"id": base, "short_id": base[:8]}, {}) if base else NOT_FOUND
    return NOT_FOUND


def _forgejo(forge: DemoForge, host: str, path: list[str], headers: dict[str, str]) -> Reply:
    if len(path) >= 6 and path[2] == "raw" and path[3] in ("commit", "branch"):
        repo = _find(forge, host, path[0], path[1])
        if repo is None or repo.private:
            return 404, b"Not Found", {}
        ref = path[4]
        if path[3] == "commit" and ref not in repo.commits:
            return 404, b"Not Found", {}
        return _raw(repo, ref, "/".join(path[5:]))
    if path[:3] != ["api", "v1", "repos"] or len(path) < 5:
        return NOT_FOUND
    repo = _find(forge, host, path[3], path[4])
    if repo is None or not _visible(repo, headers):
        return NOT_FOUND
    rest = path[5:]
    if repo.renamed_to is not None:
        owner, name = repo.renamed_to
        return 301, {"message": "moved"}, {"Location": f"/{host}/api/v1/repos/{owner}/{name}"}
    if not rest:
        return 200, {
            "id": repo.forge_id, "full_name": f"{repo.owner}/{repo.name}", "default_branch": repo.default_branch,
            "description": repo.description or "", "language": repo.language or "", "stars_count": repo.stars,
            "private": repo.private, "archived": repo.archived,
        }, {}  # fmt: skip
    if rest[:2] == ["git", "commits"] and len(rest) == 3:
        commit = repo.commits.get(rest[2])
        if commit is None:
            return (422 if _malformed(repo, rest[2]) else 404), {"message": "not found"}, {}
        stamp = {"name": "dev", "date": _stamp(commit)}
        return 200, {"sha": commit.sha, "created": _stamp(commit), "commit": {"committer": stamp}}, {}
    if rest[0] == "branches" and len(rest) == 2:
        history = repo.branches.get(rest[1])
        if not history:
            return NOT_FOUND
        head = repo.commits[history[-1]]
        return 200, {"name": rest[1], "commit": {"id": head.sha, "timestamp": _stamp(head)}}, {}
    if rest[0] == "compare" and len(rest) == 2 and "..." in rest[1]:
        base, head_sha = rest[1].split("...", 1)
        history = repo.branches.get(base)
        if history is None or head_sha not in repo.commits or host in forge.old_compare:
            return NOT_FOUND
        ahead = 0 if head_sha in history else 1
        return 200, {"total_commits": ahead, "commits": [], "files": []}, {}
    return NOT_FOUND
