"""The one way to say "after this transaction commits, do X" (docs/architecture.md "The kernel's rules in words")."""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Step = Callable[[], Awaitable[None] | None]

_pending: contextvars.ContextVar[list[Step] | None] = contextvars.ContextVar("after_commit_steps", default=None)


def after_commit(step: Step) -> None:
    """Run `step` (a plain or async function without arguments) after the enclosing transaction commits."""
    pending = _pending.get()
    if pending is None:
        raise RuntimeError("after_commit() called outside db.transaction(): there is no commit to wait for")
    if step not in pending:
        pending.append(step)


def open_steps() -> contextvars.Token[list[Step] | None]:
    """Called by the outermost `db.transaction()` as it starts: a fresh queue for its steps."""
    return _pending.set([])


def close_steps(token: contextvars.Token[list[Step] | None]) -> list[Step]:
    """Called by the outermost `db.transaction()` as it ends (commit or rollback): its queued steps, cleared."""
    steps = _pending.get() or []
    _pending.reset(token)
    return steps


async def run_steps(steps: list[Step]) -> None:
    """Called by `db.transaction()` after its commit, outside the transaction."""
    for step in steps:
        try:
            result = step()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("after-commit step %s failed", getattr(step, "__qualname__", step))
