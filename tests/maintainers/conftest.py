"""The loopback forge fixture of the maintainer tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.maintainers.support import Forge


@pytest.fixture
def forge(monkeypatch: pytest.MonkeyPatch) -> Iterator[Forge]:
    served = Forge()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    served.serve_hosts(monkeypatch)
    monkeypatch.delenv("FORGE_RAW_URL_TEMPLATE", raising=False)
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()
