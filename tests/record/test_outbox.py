"""Marking dirty keys rings the rollup worker once, after the commit and never before; Redis down is a warning."""

from __future__ import annotations

import logging

import pytest

from app.kernel import db, queue
from app.record import outbox


async def test_marking_rings_once_after_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    rings: list[bool] = []

    async def ring(**_: object) -> None:
        rings.append(db.in_transaction())

    monkeypatch.setattr(queue, "enqueue_drain", ring)
    async with db.transaction() as session:
        await outbox.mark_dirty(session, ["a" * 64], "status")
        await outbox.mark_dirty(session, ["b" * 64], "status")
        assert rings == []
    assert rings == [False]


async def test_a_rolled_back_mark_does_not_ring(monkeypatch: pytest.MonkeyPatch) -> None:
    rings: list[bool] = []

    async def ring(**_: object) -> None:
        rings.append(True)

    monkeypatch.setattr(queue, "enqueue_drain", ring)
    with pytest.raises(RuntimeError):
        async with db.transaction() as session:
            await outbox.mark_dirty(session, ["a" * 64], "status")
            raise RuntimeError("rolled back")
    assert rings == []


async def test_redis_down_is_a_warning(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async def down(**_: object) -> None:
        raise ConnectionError("connection refused")

    monkeypatch.setattr(queue, "enqueue_drain", down)
    with caplog.at_level(logging.WARNING, logger="app.record.outbox"):
        async with db.transaction() as session:
            await outbox.mark_dirty(session, ["a" * 64], "status")
    assert [r.levelname for r in caplog.records if r.name == "app.record.outbox"] == ["WARNING"]


async def test_schedule_refresh_after_commit_refuses_to_ring_inside_a_transaction() -> None:
    async with db.transaction():
        with pytest.raises(RuntimeError):
            await outbox.schedule_refresh_after_commit()
