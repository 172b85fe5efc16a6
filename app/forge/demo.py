"""A loopback forge (docs/forge.md "Demo forge"): GitHub's, GitLab's and Forgejo's API shapes and raw files for the
repositories and commits it holds, nothing else (404; 422 for a malformed commit id). One server plays every host
under a path prefix (`settings()` says the FORGE_* bases). The test suite runs it in a thread; `./run` as a
process: `python -m app.forge.demo --dir examples/forge --port N`."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from app.forge import demo_shapes
from app.forge.demo_shapes import Commit, Repo

HOSTS = ("github.com", "gitlab.com", "codeberg.org", "tarakan.lol")
_HEX = re.compile(r"[0-9a-f]{7,40}")


@dataclass(frozen=True)
class Asked:
    host: str
    path: str  # as sent, under the host's prefix, with its query
    headers: dict[str, str]  # lower-case names


class DemoForge:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.reset()

    def reset(self) -> None:
        """Forget every repository, failure and request (the suite's per-test state)."""
        self.repos: dict[tuple[str, str, str], Repo] = {}
        self.log: list[Asked] = []
        self._failing: dict[str, int] = {}
        self._slow: dict[str, float] = {}
        self._down = False
        self._limits: dict[str, tuple[float, int | None]] = {}  # host -> (reset epoch, Retry-After)
        self._ids = 1000
        self.redirects: dict[str, str] = {}  # path under a host's prefix -> Location answered with a 302
        self.old_compare: set[str] = set()  # Forgejo hosts whose compare knows branches only (before Gitea 1.23)

    # the store

    def add_repository(
        self, host: str, owner: str, name: str, default_branch: str = "main", forge_id: int | None = None,
        description: str | None = None, language: str | None = None, stars: int = 0, private: bool = False,
        archived: bool = False,
    ) -> Repo:  # fmt: skip
        self._ids += 1
        repo = Repo(host, owner, name, default_branch, forge_id or self._ids, description, language, stars, private,
                    archived, branches={default_branch: []})  # fmt: skip
        self.repos[(host, owner.lower(), name.lower())] = repo
        return repo

    def add_commit(
        self, host: str, owner: str, name: str, sha: str, files: dict[str, bytes],
        committed_at: datetime | None = None, on_default_branch: bool = True,
    ) -> Commit:  # fmt: skip
        """A commit holding exactly `files`; on the default branch it becomes that branch's head."""
        repo = self.repo(host, owner, name)
        made = Commit(sha, dict(files), committed_at or datetime.now(UTC).replace(microsecond=0))
        repo.commits[sha] = made
        if on_default_branch:
            self.set_head(host, owner, name, repo.default_branch, sha)
        return made

    def set_head(self, host: str, owner: str, name: str, branch: str, sha: str) -> None:
        history = self.repo(host, owner, name).branches.setdefault(branch, [])
        if sha in history:
            del history[history.index(sha) + 1 :]  # a reset back to an older commit
        else:
            history.append(sha)

    def rename(self, host: str, owner: str, name: str, new_owner: str, new_name: str) -> None:
        """The repository now answers as new_owner/new_name; the old name redirects (GitHub: to its id)."""
        repo = self.repo(host, owner, name)
        moved = Repo(**{**repo.__dict__, "owner": new_owner, "name": new_name})
        self.repos[(host, new_owner.lower(), new_name.lower())] = moved
        repo.renamed_to = (new_owner, new_name)

    def repo(self, host: str, owner: str, name: str) -> Repo:
        return self.repos[(host, owner.lower(), name.lower())]

    # trouble

    def fail(self, host: str, status: int = 503) -> None:
        """Every request to `host` answers `status` (0: back to normal)."""
        if status:
            self._failing[host] = status
        else:
            self._failing.pop(host, None)

    def slow(self, host: str, seconds: float) -> None:
        self._slow[host] = seconds

    def down(self) -> None:
        """Every connection is closed without an answer."""
        self._down = True

    def up(self) -> None:
        self._down = False
        self._failing.clear()
        self._slow.clear()

    def rate_limit(self, host: str = "github.com", reset: float | None = None, retry_after: int | None = None) -> None:
        """The host's API answers as its rate is spent until epoch second `reset`: 403 with
        `X-RateLimit-Remaining: 0` and `X-RateLimit-Reset`, or with `retry_after` a 429 with `Retry-After`."""
        self._limits[host] = (reset if reset is not None else time.time() + 60, retry_after)

    def requests(self, host: str | None = None, contains: str = "") -> list[Asked]:
        with self._lock:
            return [a for a in self.log if (host is None or a.host == host) and contains in a.path]

    # serving

    def request_handler(self) -> type[BaseHTTPRequestHandler]:
        """The server's handler class: every GET answered by this forge, nothing logged (a subclass adds methods)."""
        forge = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                forge._handle(self)

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler

    def start(self, port: int = 0, bind: str = "127.0.0.1") -> DemoForge:
        self.server = ThreadingHTTPServer((bind, port), self.request_handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="demo-forge", daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    @property
    def root(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def settings(self) -> dict[str, str]:
        """The FORGE_* bases that make Tarakan ask this forge for every host."""
        return {
            "FORGE_GITHUB_API_URL": f"{self.root}/github.com/api",
            "FORGE_GITHUB_RAW_URL": f"{self.root}/github.com/raw",
            "FORGE_GITLAB_URL": f"{self.root}/gitlab.com",
            "FORGE_CODEBERG_URL": f"{self.root}/codeberg.org",
            "FORGE_TARAKAN_URL": f"{self.root}/tarakan.lol",
        }

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        segments = [unquote(s) for s in parts.path.split("/")[1:]]
        host = segments[0] if segments else ""
        headers = {k.lower(): v for k, v in request.headers.items()}
        with self._lock:
            self.log.append(Asked(host, request.path[len(host) + 1 :], headers))
        if self._down:
            request.close_connection = True
            request.connection.close()
            return
        time.sleep(self._slow.get(host, 0.0))
        query = parse_qs(parts.query)
        status, body, extra = self._answer(host, segments[1:], query, headers)
        if isinstance(body, bytes):
            payload, kind = body, "application/octet-stream"
        else:
            payload, kind = json.dumps(body).encode(), "application/json"
        if status == 200 and kind == "application/json":
            extra.setdefault("ETag", 'W/"' + hashlib.sha1(payload).hexdigest() + '"')
            if headers.get("if-none-match") == extra["ETag"]:
                status, payload = 304, b""
        request.send_response(status)
        for name, value in extra.items():
            request.send_header(name, value)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        with contextlib.suppress(OSError):
            request.wfile.write(payload)

    def _answer(
        self, host: str, path: list[str], query: dict[str, list[str]], headers: dict[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        if host not in HOSTS:
            return 404, {"message": "Not Found"}, {}
        if host in self._failing:
            return self._failing[host], {"message": "failing"}, {}
        location = self.redirects.get("/" + "/".join(path))
        if location is not None:
            return 302, b"", {"Location": location}
        api = path[:1] == ["api"]
        limit = self._limits.get(host)
        if api and limit is not None and time.time() < limit[0]:
            if limit[1] is not None:
                return 429, {"message": "slow down"}, {"Retry-After": str(limit[1])}
            spent = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(limit[0]))}
            return 403, {"message": "API rate limit exceeded"}, spent
        return demo_shapes.answer(self, host, path, query, headers)


def load(forge: DemoForge, folder: Path) -> None:
    """`{folder}/{host}/{owner}/{name}/repository.json` (docs/forge.md "Demo forge"): the repository's fields and
    its commits, oldest first, each `{"sha", "committed_at", "dir"}` whose files are under `{dir}/`."""
    for meta in sorted(folder.glob("*/*/*/repository.json")):
        name_dir = meta.parent
        host, owner, name = name_dir.parent.parent.name, name_dir.parent.name, name_dir.name
        doc = json.loads(meta.read_text())
        forge.add_repository(
            host, owner, name, doc.get("default_branch", "main"), doc.get("forge_id"), doc.get("description"),
            doc.get("language"), int(doc.get("stars", 0)),
        )  # fmt: skip
        for entry in doc.get("commits", []):
            root = name_dir / entry["dir"]
            files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
            when = datetime.fromisoformat(entry["committed_at"]) if entry.get("committed_at") else None
            forge.add_commit(host, owner, name, entry["sha"], files, when, entry.get("on_default_branch", True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.forge.demo", description=__doc__)
    parser.add_argument("--dir", type=Path, help="repositories and commits to serve (docs/forge.md)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bind", default="127.0.0.1", help="a loopback address")
    args = parser.parse_args(argv)
    forge = DemoForge()
    if args.dir is not None:
        load(forge, args.dir)
    forge.start(args.port, args.bind)
    for name, value in forge.settings().items():
        print(f"{name}={value}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    forge.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
