"""The event-loop watchdog (docs/operations.md "TarakanEventLoopStalled"): a task that sleeps TICK and measures how
late it wakes. Every lateness goes to `tarakan_event_loop_lag_seconds`; a stall over STALL logs one line naming
the work in flight during it (requests as method and route template, worker jobs by name), registered by the
request middleware and the worker with `in_flight`.

A blocking call has often returned by the time the watchdog runs again, so the line names the work still running
and the work that finished after the watchdog was due: one of them held the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator

from app.kernel.metrics import EVENT_LOOP_LAG

TICK = 0.1  # seconds between wake-ups
STALL = 0.25  # a wake-up later than this is logged
NAMED = 5  # at most this many names in one line

log = logging.getLogger("tarakan.watchdog")

_running: dict[int, Callable[[], str]] = {}
_finished: deque[tuple[str, float]] = deque(maxlen=64)  # (name, monotonic end): names, so no request is kept
_ids = itertools.count()
_task: asyncio.Task[None] | None = None


@contextlib.contextmanager
def in_flight(describe: Callable[[], str]) -> Iterator[None]:
    """Registers the work of the block (a request, a job) for the stall line; `describe` names it when a stall is
    logged or the block ends (a request's route template is known only after routing)."""
    key = next(_ids)
    _running[key] = describe
    try:
        yield
    finally:
        del _running[key]
        _finished.append((describe(), time.monotonic()))


def _suspects(since: float) -> list[str]:
    names = [name for name, ended in _finished if ended >= since]
    names += [describe() for describe in list(_running.values())]
    unique = list(dict.fromkeys(names))
    if len(unique) > NAMED:
        return [*unique[:NAMED], f"and {len(unique) - NAMED} more"]
    return unique


async def watch() -> None:
    """Runs until cancelled: one histogram observation per wake-up, one log line per stall."""
    while True:
        due = time.monotonic() + TICK
        await asyncio.sleep(TICK)
        lag = max(0.0, time.monotonic() - due)
        EVENT_LOOP_LAG.observe(lag)
        if lag > STALL:
            suspects = _suspects(due)
            log.warning(
                "event loop stalled for %.0f ms; in flight: %s",
                lag * 1000,
                ", ".join(suspects) or "nothing registered",
                extra={"duration_ms": round(lag * 1000, 1), "in_flight": suspects},
            )


def start() -> asyncio.Task[None]:
    """The watchdog of the running loop, started once (the worker's startup runs again after each reconnection)."""
    global _task
    loop = asyncio.get_running_loop()
    if _task is None or _task.done() or _task.get_loop() is not loop:
        _task = loop.create_task(watch(), name="tarakan-watchdog")
    return _task


async def stop() -> None:
    global _task
    task, _task = _task, None
    if task is not None and task.get_loop() is asyncio.get_running_loop():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
