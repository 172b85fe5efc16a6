"""The statements this process sends, as SQLAlchemy's statement listeners are told them (the driver's own execute
included: app.kernel.driver tells them too)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from app.kernel import db


@contextmanager
def statements_sent() -> Iterator[list[str]]:
    """Every statement sent on the primary's pools (transactions, and the autocommit pool of public reads) inside
    the block, in order, with the driver's placeholders."""
    sent: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    engines = [db.engine().sync_engine, db.autocommit_engine().sync_engine]
    for engine in engines:
        event.listen(engine, "before_cursor_execute", before)
    try:
        yield sent
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", before)
