"""The one way to say "after this transaction commits, do X".

`after_commit(step)` inside `db.transaction()` queues `step` on the outermost open transaction; the transaction
runs the queued steps once, in order, after it commits, and drops them if it rolls back. A step queued twice in
one transaction (the same function object) runs once: ringing the rollup worker or dropping a cache is idempotent,
and one ring per commit is enough. Steps run outside any transaction, so a worker they wake reads the committed
state. A failing step is logged, never raised: the commit already happened and the caller's answer stands.
"""

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
