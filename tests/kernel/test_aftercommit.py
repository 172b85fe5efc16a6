"""After-commit steps run once, after the outermost transaction commits, outside it; a rollback drops them."""

from __future__ import annotations

import pytest

from app.kernel import db
from app.kernel.aftercommit import after_commit


async def test_steps_run_once_after_the_outermost_commit_outside_the_transaction() -> None:
    seen: list[tuple[str, bool]] = []

    def sync_step() -> None:
        seen.append(("sync", db.in_transaction()))

    async def async_step() -> None:
        seen.append(("async", db.in_transaction()))

    async with db.transaction():
        after_commit(sync_step)
        async with db.transaction():  # an inner transaction queues on the outer one
            after_commit(async_step)
            after_commit(sync_step)  # the same step twice runs once
        assert seen == []
    assert seen == [("sync", False), ("async", False)]


async def test_a_rollback_drops_the_steps() -> None:
    seen: list[str] = []
    with pytest.raises(RuntimeError, match="boom"):
        async with db.transaction():
            after_commit(lambda: seen.append("ran"))
            raise RuntimeError("boom")
    async with db.transaction():
        pass
    assert seen == []


async def test_a_failing_step_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def broken() -> None:
        raise ConnectionError("redis is down")

    async with db.transaction():
        after_commit(broken)
        after_commit(lambda: seen.append("next"))
    assert seen == ["next"]
    assert "after-commit step" in caplog.text


def test_outside_a_transaction_there_is_no_commit_to_wait_for() -> None:
    with pytest.raises(RuntimeError, match="outside db"):
        after_commit(lambda: None)
