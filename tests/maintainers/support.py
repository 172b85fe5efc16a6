"""A forge on loopback for the maintainer tests (no tests here): a threaded HTTP server whose answers the test
sets per path, and which records the paths it was asked for. Nothing leaves the machine."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.kernel.config import FORGE_BASE_SETTINGS
from app.maintainers.forge import VERIFY_PATH


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the status line
    endless: bool = False  # after the headers, bytes until the client goes away


class Forge:
    """`answers[path]` is what GET path answers (404 when absent); `asked` lists the paths requested."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self.asked: list[str] = []
        self.sent: dict[str, int] = {}  # path -> body bytes written before the client went away
        forge = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                forge.asked.append(self.path)
                answer = forge.answers.get(self.path, Answer(404, b"Not Found"))
                time.sleep(answer.delay)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if not answer.endless:
                    self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                written = 0
                try:
                    if answer.endless:
                        chunk = b"x" * 1024
                        while written < 64 * 1024 * 1024:
                            self.wfile.write(chunk)
                            self.wfile.flush()
                            written += len(chunk)
                    else:
                        self.wfile.write(answer.body)
                        written = len(answer.body)
                except OSError:
                    pass
                forge.sent[self.path] = written

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]

    def base(self, host: str) -> str:
        """The base this forge plays for `host` (a path per host: one server plays them all)."""
        return f"http://127.0.0.1:{self.port}/{host}"

    def serve_hosts(self, monkeypatch: pytest.MonkeyPatch, *hosts: str) -> None:
        """Be the forge of `hosts` (all four by default): their FORGE_* bases point here."""
        for host in hosts or tuple(FORGE_BASE_SETTINGS):
            monkeypatch.setenv(FORGE_BASE_SETTINGS[host][0], self.base(host))

    def path_of(self, host: str, owner: str, name: str, path: str = VERIFY_PATH) -> str:
        """The path each forge serves a file at the default branch under (the forge's own shape)."""
        shape = {
            "github.com": f"{owner}/{name}/HEAD/{path}",
            "gitlab.com": f"{owner}/{name}/-/raw/HEAD/{path}",
        }.get(host, f"{owner}/{name}/raw/branch/HEAD/{path}")  # Forgejo: codeberg.org, tarakan.lol
        return f"/{host}/{shape}"

    def serve_file(self, host: str, owner: str, name: str, text: str) -> None:
        self.answers[self.path_of(host, owner, name)] = Answer(200, text.encode())

    def fail(self, host: str, owner: str, name: str, status: int = 500) -> None:
        self.answers[self.path_of(host, owner, name)] = Answer(status, b"Internal Server Error")

    def remove(self, host: str, owner: str, name: str) -> None:
        self.answers.pop(self.path_of(host, owner, name), None)
