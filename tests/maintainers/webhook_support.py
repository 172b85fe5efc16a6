"""A webhook receiver on loopback for the webhook tests (no tests here), and the maintainer a webhook needs.

The receiver records every POST (headers, exact body, when it came) and answers from a script: `answers` is consumed one
status per request (200 once it is empty); `hang` makes the next request wait (without answering) until `release`
is set, so a test can kill a worker while its request is in flight."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from app.accounts.models import Account
from app.accounts.service import create_token
from app.registry.models import Repository
from tests import factories
from tests.sql import execute

SCOPE = "repositories:maintain"


TOLERANCE_SECONDS = 300  # what docs/security.md "Webhook signatures" tells receivers to accept


def verify(secret: str, headers: dict[str, str], body: bytes, now: float) -> bool:
    """A receiver's check of `X-Tarakan-Signature-V2`, as docs/security.md writes it: the timestamp at most five
    minutes from now, and the signature over `<timestamp>.` and the body."""
    timestamp = headers.get("x-tarakan-timestamp", "")
    if not timestamp.isdigit() or abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        return False
    signed = timestamp.encode() + b"." + body
    expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers.get("x-tarakan-signature-v2", ""))


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int | None  # what the receiver answered (None: it hung and never answered)
    at: float  # time.time() when it came

    @property
    def delivery(self) -> str:
        return self.headers["x-tarakan-delivery"]

    @property
    def json(self) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self.body)
        return decoded

    def signed_with(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(self.headers["x-tarakan-signature-256"], expected)


@dataclass
class Receiver:
    answers: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    hang: bool = False
    hanging: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        receiver = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with lock:
                    if receiver.hang:
                        receiver.hang = False
                        status = None
                    else:
                        status = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.received.append(Received(headers, body, status, time.time()))
                if status is None:
                    receiver.hanging.set()
                    receiver.release.wait(30)
                    return
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: object) -> None:
                return

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def verify_request(self, request: Any, client_address: Any) -> bool:
                receiver.connections += 1
                return True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def delivered(self) -> list[Received]:
        """The requests answered with a 2xx, first per delivery id (what a deduplicating receiver keeps)."""
        seen: set[str] = set()
        kept: list[Received] = []
        for item in self.received:
            if item.status is not None and 200 <= item.status < 300 and item.delivery not in seen:
                seen.add(item.delivery)
                kept.append(item)
        return kept

    def wait_for(self, count: int, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            assert time.monotonic() < deadline, f"the receiver got {len(self.received)} of {count} requests"
            time.sleep(0.02)


async def maintainer(repository: Repository, **attributes: str) -> tuple[Account, dict[str, str]]:
    """An account that maintains `repository` (as a verified claim leaves it) and its bearer header."""
    account = await factories.create_account(**attributes)
    await execute(
        "INSERT INTO repository_maintainers (repository_id, account_id) VALUES (:r, :a)",
        r=repository.id,
        a=account.id,
    )
    return account, {"Authorization": "Bearer " + await create_token(account.id, [SCOPE])}


def webhooks_url(repository: Repository) -> str:
    return f"/api/v1/repos/{repository.host}/{repository.owner}/{repository.name}/webhooks"
