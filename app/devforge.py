"""The demo forge of `./run` and the README test: app.forge.demo serving a folder (docs/forge.md "Demo forge"),
following it as the seed writes into it, with a branch's head moved by an HTTP POST (README "A first session")."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from app.devservices import free_port

DEMO_FORGE_DIR = "DEMO_FORGE_DIR"  # the folder ./run's demo forge serves; the seed writes its repositories there
DEMO_FORGE_URL = "DEMO_FORGE_URL"  # its root URL (README "A first session": moving a branch's head)
EXAMPLES_FORGE = Path(__file__).resolve().parent.parent / "examples" / "forge"


def write_atomically(path: Path, data: bytes) -> None:
    """A reader of the demo forge's folder never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


class FolderForge:
    """The loopback demo forge (app.forge.demo, docs/forge.md "Demo forge") serving a folder, in a thread of the
    caller (./run, the README test). It reads the folder again whenever a `repository.json` in it changed (the
    seed writes its repositories while the site is up), applies each one's `"heads": {branch: sha}`, and
    `POST /-/heads/{host}/{owner}/{name}` with `{"sha": ..., "branch": ...}` (the default branch when left out)
    writes that into the repository's file: the head moved, as a push would."""

    def __init__(self, folder: str | os.PathLike[str], port: int | None = None):
        self.folder = Path(folder).resolve()
        self.port = port or free_port()
        self.forge: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def settings(self) -> dict[str, str]:
        """The FORGE_* bases that point every host at this forge."""
        return dict(self.forge.settings())

    def start(self) -> FolderForge:
        from app.forge.demo import DemoForge

        self.folder.mkdir(parents=True, exist_ok=True)
        self.forge = _folder_forge(DemoForge, self.folder)
        self.forge.start(self.port)
        return self

    def stop(self) -> None:
        if self.forge is not None:
            self.forge.stop()


def _folder_forge(base: type[Any], folder: Path) -> Any:
    """An instance of a subclass of app.forge.demo.DemoForge that follows `folder` (FolderForge)."""
    from app.forge.demo import load

    class Following(base):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self._reading = threading.Lock()
            self._stamp: object = None

        def _follow(self) -> None:
            files = sorted(folder.glob("*/*/*/repository.json"))
            stamp = [(str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files]
            with self._reading:
                if stamp == self._stamp:
                    return
                fresh = base()
                load(fresh, folder)
                for meta in files:
                    host, owner, name = meta.parent.parent.parent.name, meta.parent.parent.name, meta.parent.name
                    for branch, sha in json.loads(meta.read_text()).get("heads", {}).items():
                        fresh.set_head(host, owner, name, branch, sha)
                self.repos, self._stamp = fresh.repos, stamp
                with self._lock:  # a long ./run keeps the newest requests only
                    del self.log[:-1000]

        def _answer(self, host: str, path: list[str], query: Any, headers: Any) -> Any:
            self._follow()
            return super()._answer(host, path, query, headers)

        def move_head(self, host: str, owner: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            self._follow()
            meta = folder / host / owner / name / "repository.json"
            repo = self.repos.get((host, owner.lower(), name.lower()))
            sha = body.get("sha")
            if repo is None or not meta.is_file():
                return 404, {"message": "Not Found"}
            if sha not in repo.commits:
                return 422, {"message": "sha: not a commit of this repository"}
            branch = str(body.get("branch") or repo.default_branch)
            doc = json.loads(meta.read_text())
            doc["heads"] = {**doc.get("heads", {}), branch: sha}
            write_atomically(meta, json.dumps(doc, indent=2).encode())
            return 200, {"branch": branch, "head": sha}

        def request_handler(self) -> Any:
            forge = self
            base_handler: Any = super().request_handler()

            class Handler(base_handler):  # type: ignore[misc]
                def do_POST(self) -> None:
                    parts = self.path.split("/")  # /-/heads/{host}/{owner}/{name}
                    try:
                        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    except ValueError:
                        body = None
                    if len(parts) != 6 or parts[1:3] != ["-", "heads"] or not isinstance(body, dict):
                        status, answer = 404, {"message": 'POST /-/heads/{host}/{owner}/{name} {"sha"}'}
                    else:
                        status, answer = forge.move_head(parts[3], parts[4], parts[5], body)
                    payload = json.dumps(answer).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            return Handler

    return Following()


def forge_id(host: str, owner: str, name: str) -> int:
    """A stable id per name: the forge's id must not change when another repository is added to the folder."""
    return 80_000_000 + int(hashlib.sha256(f"{host}/{owner}/{name}".lower().encode()).hexdigest(), 16) % 10_000_000


def publish_repository(
    folder: Path,
    host: str,
    owner: str,
    name: str,
    metadata: dict[str, Any],
    commits: Sequence[tuple[str, datetime | None]] = (),
    files: dict[str, bytes] | None = None,
) -> None:
    """Put a repository in the demo forge's folder: `commits` (oldest first, the last one the default branch's head)
    all hold `files`, as a repository whose later commits only added files would; repository.json is written last,
    so the forge never serves a commit whose files are not there yet."""
    where = folder / host / owner / name
    for path, data in (files or {}).items():
        write_atomically(where / "tree" / path, data)
    doc = {
        "forge_id": forge_id(host, owner, name),
        "default_branch": "main",
        **metadata,
        "commits": [
            {"sha": sha, "dir": "tree", **({"committed_at": at.isoformat()} if at else {})} for sha, at in commits
        ],
    }
    write_atomically(where / "repository.json", json.dumps(doc, indent=2).encode())
