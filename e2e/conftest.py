"""Browser tests: Debian's Chromium (pytest-playwright, sync API) against a real `tarakan serve` process that
shares the test database. Every test starts from empty tables; data is created with the real write path.

Ordering: pytest-playwright's session-scoped sync `playwright` keeps an event loop running on the main thread
once the first sync browser test starts, after which pytest-asyncio cannot run async tests. `testpaths` runs
tests/ before e2e/, and the async moderation flow sorts before test_site.py; keep new async e2e modules
alphabetically before the sync ones (or make them sync).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import ConsoleMessage, Page

from tests.conftest import clean_database, services
from tests.harness import ARTIFACTS, running_server

__all__ = ["clean_database", "services"]  # session services and per-test truncation, shared with tests/

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS, "headless": True}


@pytest.fixture(scope="session")
def live_server(services: dict[str, str]) -> Iterator[str]:
    """A real server process; registry stats uncached so each test sees its own rows at once."""
    with running_server({"REGISTRY_STATS_TTL": "0"}) as base:
        yield base


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def console_errors(page: Page) -> Iterator[list[str]]:
    """Console errors and uncaught exceptions of the page (CSP violations are reported as console errors);
    the test fails if any remain at the end."""
    errors: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    yield errors
    assert errors == [], errors
