"""A pytest plugin for the mutation run's children (bench/mutation.py loads it with `-p`): the run migrated its
database once, so a child does not run Alembic again (~4 s each), and a test file that never touches the
database (TARAKAN_MUTATION_PURE, comma-separated paths) skips the per-test TRUNCATE of tests/conftest.py, and
the modules that fixture imports are imported once in the fork server. Tests that
use the database are run exactly as in the suite."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

_PURE = frozenset(filter(None, os.environ.get("TARAKAN_MUTATION_PURE", "").split(",")))
_current_is_pure = False


def _noop() -> None:
    return None


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("TARAKAN_MUTATION_MIGRATED") != "1":
        return
    import app.migrate

    app.migrate.upgrade_to_head = _noop
    # what tests/conftest.py's clean_database imports on first use (~1.2 s): imported once in the fork server
    for name in ("app.kernel.flags", "app.registry.queries", "app.registry.stats", "app.seo.sitemap"):
        __import__(name)
    __import__("app.site.home_infestations")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    conftest = __import__("sys").modules.get("tests.conftest")
    if conftest is None or getattr(conftest, "_mutation_wrapped", False):
        return
    for name in ("truncate_all", "reset_rate_counters"):
        original = getattr(conftest, name)

        def unless_pure(original: Any = original) -> None:
            if not _current_is_pure:
                original()

        setattr(conftest, name, unless_pure)
    conftest._mutation_wrapped = True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None]:
    global _current_is_pure
    _current_is_pure = item.nodeid.split("::", 1)[0] in _PURE
    yield
