"""arq worker settings and job functions (the only importer of arq besides app/kernel/queue.py); several workers share one
Postgres and one Redis (docs/scaling.md "What makes N instances safe")."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any, TypedDict, TypeVar

from arq import cron
from arq.connections import RedisSettings
from arq.cron import CronJob
from arq.typing import WorkerCoroutine
from arq.worker import Function, Worker, func, get_kwargs
from arq.worker import Retry as Retry  # re-exported: tests assert the retry without importing arq
from sqlalchemy import exc as sa_exc

from app.disclosure import clock as disclosure_clock
from app.evidence import observe as observations
from app.evidence import recheck as evidence
from app.exports import service as exports
from app.feed.entries import rendered_entry
from app.forge import http as forge_http
from app.infestations import dirty_queue, maintenance, shadow_sampler
from app.kernel import db, heap, outages, watchdog
from app.kernel.config import ConfigError, settings
from app.kernel.logs import configure_logging
from app.kernel.metrics import WORKER_RECONNECTS, start_metrics_server
from app.kernel.queue import close_pools, enqueue_drain, enqueue_webhooks
from app.maintainers import delivery, recheck
from app.ops import leases
from app.registry import metadata
from app.trust import refresh as trust

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_TRIES = 5
WINDOWS_LEASE = "recompute_windows"
RECONCILE_LEASE = "reconcile"
SHADOW_LEASE = "shadow_compare"
EXPORT_LEASE = "export"
MAINTAINER_RECHECK_LEASE = "maintainer_recheck"
OBSERVE_LEASE = "observe"
METADATA_PENDING_LEASE = "metadata_pending"
METADATA_REFRESH_LEASE = "metadata_refresh"
EVIDENCE_RECHECK_LEASE = "evidence_recheck"

# `ctx` is arq's own job context, typed as arq types it: a plain dict arq fills and passes (its job protocol,
# `WorkerCoroutine`, takes `dict[Any, Any]`, which a TypedDict would not satisfy), not one of our shapes.


class Drained(TypedDict):
    """One drain batch's figures (the job's result)."""

    refreshed: int
    failed: int
    released: int
    remaining_claimable: int


class ExportRun(exports.Rebuilt):
    """The export job's `job_runs` detail: why it was due, and the rebuild."""

    reason: str


def _transient(exc: BaseException) -> bool:
    """Database unreachable or connection dropped: worth an arq retry (not a bug in our SQL). Counted and logged
    once per interval as a database outage of the worker (app.kernel.outages, docs/reliability.md)."""
    transient = (isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated) or isinstance(
        exc, sa_exc.OperationalError | sa_exc.InterfaceError | OSError | TimeoutError
    )
    if transient:
        outages.record(outages.DATABASE, exc, source="worker")
        WORKER_RECONNECTS.labels(dependency=outages.DATABASE).inc()
    return transient


def _retry_defer(ctx: dict[str, Any]) -> int:
    tries = max(1, int(ctx.get("job_try", 1)))
    return min(5 << (tries - 1), 120)


async def _retrying(ctx: dict[str, Any], work: Awaitable[T]) -> T:
    """`work`'s result; a database outage becomes arq's Retry, deferred 5 s and doubling up to 120 s."""
    try:
        return await work
    except Exception as exc:
        if _transient(exc):
            raise Retry(defer=_retry_defer(ctx)) from exc
        raise


async def drain_dirty_keys(ctx: dict[str, Any]) -> Drained:
    """One drain batch (at most 200 keys). While claimable work remains, enqueue a continuation; when only
    throttled or backed-off keys remain, enqueue a drain deferred to the soonest `available_at`."""
    result = await _retrying(ctx, dirty_queue.drain(worker_id=ctx.get("worker_id")))
    try:
        if result.remaining_claimable > 0:
            await enqueue_drain(redis=ctx.get("redis"))
        elif result.next_available_in_seconds is not None:
            await enqueue_drain(delay_seconds=result.next_available_in_seconds, redis=ctx.get("redis"))
    except Exception as exc:  # the per-minute sweep picks the keys up
        log.warning("could not enqueue the next drain: %s", exc)
    return {
        "refreshed": result.refreshed,
        "failed": result.failed,
        "released": result.released,
        "remaining_claimable": result.remaining_claimable,
    }


async def sweep_dirty_keys(ctx: dict[str, Any]) -> Drained:
    """Every minute: drain whatever is pending (covers rings lost while Redis was down)."""
    return await drain_dirty_keys(ctx)


def _slot(ctx: dict[str, Any], slot: str | None) -> datetime:
    """The scheduled time a singleton run stands for: explicit, else the job's scheduled score to the minute
    (arq defers a cron job to its `next_run`, so every worker triggered for it sees the same minute)."""
    if slot is not None:
        return datetime.fromisoformat(slot)
    score = ctx.get("score")
    when = datetime.fromtimestamp(score / 1000, tz=UTC) if score else datetime.now(UTC)
    return when.replace(second=0, microsecond=0)


async def _singleton(ctx: dict[str, Any], name: str, slot: datetime, job: Any) -> bool:
    # one holder per job, not per process: a worker runs several jobs at once, and two triggers of one slot
    # landing in the same worker must not both pass as "the same holder"
    holder = f"{ctx.get('worker_id')}:{ctx.get('job_id')}"
    return await _retrying(ctx, leases.run_singleton(name, slot, job, holder=holder))


async def recompute_windows_job(ctx: dict[str, Any], slot: str | None = None) -> bool:
    """Hourly window decay over every pattern, once fleet-wide per slot. Returns False when skipped."""

    async def run() -> dict[str, int]:
        return {"patterns": await maintenance.recompute_all_windows()}

    return await _singleton(ctx, WINDOWS_LEASE, _slot(ctx, slot), run)


async def reconcile_job(ctx: dict[str, Any], slot: str | None = None) -> bool:
    """Nightly reconcile, once fleet-wide per slot (recorded in `job_runs` as "reconcile")."""

    async def run() -> dict[str, int]:
        return await maintenance.reconcile(record=False)

    return await _singleton(ctx, RECONCILE_LEASE, _slot(ctx, slot), run)


async def shadow_compare_job(ctx: dict[str, Any], slot: str | None = None) -> bool:
    """Continuous shadow-compare (app.infestations.shadow_sampler): triggered every minute, it runs once fleet-wide
    per slot every INFESTATIONS_SHADOW_PERIOD_MINUTES, on INFESTATIONS_SHADOW_SAMPLE keys (0: off). Returns False
    when skipped."""
    cfg = settings()
    when = _slot(ctx, slot)
    if cfg.shadow_sample_keys == 0 or int(when.timestamp() // 60) % cfg.shadow_period_minutes != 0:
        return False

    async def run() -> dict[str, Any]:
        result = await shadow_sampler.run_once(
            sample_size=cfg.shadow_sample_keys, recheck_seconds=cfg.shadow_recheck_seconds
        )
        return result.summary()

    return await _singleton(ctx, SHADOW_LEASE, when, run)


async def export_job(ctx: dict[str, Any], slot: str | None = None) -> bool:
    """The bulk export (app.exports.service), checked every minute and built once fleet-wide when due: none yet,
    the newest a day old, or the newest holding a record withdrawn since it was built (a takedown: rebuilt at the
    next minute's check, so takedowns within one minute share one rebuild). Returns False when nothing was due or
    another worker ran it."""
    when = _slot(ctx, slot)
    due = await _retrying(ctx, exports.export_due(when))
    if due is None:
        return False

    async def run() -> ExportRun:
        return {"reason": due, **await exports.rebuild_export()}

    return await _singleton(ctx, EXPORT_LEASE, when, run)


async def maintainer_recheck_job(ctx: dict[str, Any], slot: str | None = None) -> bool:
    """The daily recheck of every maintainer's verification file (app.maintainers.recheck), once fleet-wide per
    slot; expired claims a month old are pruned with it. Returns False when another worker ran it."""

    async def run() -> dict[str, int]:
        ended = await recheck.recheck_maintainers()
        for item in ended:
            log.info("maintainer @%s of %s ended (%s)", item.handle, item.repository, item.reason)
        return {"ended": len(ended), "pruned_claims": await recheck.prune_expired_claims()}

    return await _singleton(ctx, MAINTAINER_RECHECK_LEASE, _slot(ctx, slot), run)


async def metadata_pending_job(ctx: dict[str, Any], slot: str | None = None) -> bool:
    """Every five minutes: the forge's record of repositories registered while it failed (app.registry.metadata),
    once fleet-wide per slot. Returns False when another worker ran it."""

    async def run() -> dict[str, int]:
        return await metadata.look_up_pending()

    return await _singleton(ctx, METADATA_PENDING_LEASE, _slot(ctx, slot), run)


async def metadata_refresh_job(ctx: dict[str, Any], slot: str | None = None) -> bool:
    """Daily: listed repositories' forge records refreshed with their ETags, and the `forge_missing` quarantine
    (app.registry.metadata), once fleet-wide per slot. Returns False when another worker ran it."""

    async def run() -> dict[str, int]:
        return await metadata.refresh_listed()

    return await _singleton(ctx, METADATA_REFRESH_LEASE, _slot(ctx, slot), run)


async def evidence_recheck_job(ctx: dict[str, Any], slot: str | None = None) -> bool:
    """Every 30 s: pending reports whose re-check is due, checked at the forge and published, rescheduled or
    expired (app.evidence.recheck), once fleet-wide per half-minute slot. Returns False when another worker ran it."""
    when = _slot(ctx, slot) if slot is not None else _half_minute(ctx)

    async def run() -> dict[str, int]:
        return (await evidence.recheck_pending()).summary()

    return await _singleton(ctx, EVIDENCE_RECHECK_LEASE, when, run)


def _half_minute(ctx: dict[str, Any]) -> datetime:
    score = ctx.get("score")
    when = datetime.fromtimestamp(score / 1000, tz=UTC) if score else datetime.now(UTC)
    return when.replace(second=when.second - when.second % 30, microsecond=0)


async def observe_job(ctx: dict[str, Any], slot: str | None = None) -> bool:
    """Daily: is the code still there? Every listed repository not observed today (app.evidence.observe), once
    fleet-wide per slot. Returns False when another worker ran it."""

    async def run() -> observations.RunSummary:
        return (await observations.observe(limit=observations.DAILY_LIMIT)).summary()

    return await _singleton(ctx, OBSERVE_LEASE, _slot(ctx, slot), run)


async def disclosure_clock_job(ctx: dict[str, Any]) -> dict[str, int]:
    """Every minute: coordinated disclosure's clock publishes every embargo whose deadline passed
    (app/disclosure/clock.py). Every worker may run it: each batch takes only the rows no other holds (SKIP
    LOCKED), so no lease and no `job_runs` row."""
    return {"published": await _retrying(ctx, disclosure_clock.publish_due())}


async def deliver_webhooks(ctx: dict[str, Any]) -> dict[str, int]:
    """One webhook delivery run (app.maintainers.delivery): new change-feed entries become deliveries, then due
    ones are sent for up to 30 s. Rung after every commit that wrote entries and every minute (the backstop); it
    rings its own continuation while deliveries are due, else one at the next retry's time (or a lease's end)."""
    result = await _retrying(ctx, delivery.run(rendered_entry))
    try:
        next_due_in = result.backlog.next_due_in
        if next_due_in is not None:
            await enqueue_webhooks(delay_seconds=max(0.0, next_due_in), redis=ctx.get("redis"))
    except Exception as exc:  # the per-minute run picks them up
        log.warning("could not ring the next webhook run: %s", exc)
    return result.summary()


async def startup(ctx: dict[str, Any]) -> None:
    """At start and after each reconnection to Redis: ring a drain, so keys dirtied while no worker listened (rings
    lost in a Redis outage) drain now rather than at the next minute's sweep. The event-loop watchdog starts once."""
    watchdog.start()
    if "worker_id" in ctx:
        log.info("rollup worker %s reconnected to Redis", ctx["worker_id"])
    else:
        ctx["worker_id"] = leases.new_worker_id()
        # as a web process does (app.main.lifespan): the first drains of a worker started into a burst find their
        # connections open, and the collector no longer walks the imported code (docs/scaling.md)
        await db.warm_pools()
        heap.settle()
        log.info("rollup worker %s started", ctx["worker_id"])
    try:
        await enqueue_drain(redis=ctx.get("redis"))
        await enqueue_webhooks(redis=ctx.get("redis"))
    except Exception as exc:  # the sweep covers it
        log.warning("could not ring a drain at start: %s", exc)


RECONNECT_BACKOFF = (1.0, 30.0)  # first and longest wait between reconnection attempts, doubling in between


class SurvivingWorker(Worker):
    """arq's worker, kept alive when Redis goes away: the loop that polls the queue fails, the worker counts it,
    waits (backing off from 1 s to 30 s) and polls again; jobs in flight keep running. Postgres outages are the
    jobs' business (`_transient`: retried with a deferral). docs/reliability.md."""

    async def main(self) -> None:
        wait = RECONNECT_BACKOFF[0]
        while True:
            started = asyncio.get_running_loop().time()
            try:
                await super().main()
                return
            except Exception as exc:
                if outages.dependency_of(exc) != outages.REDIS and not isinstance(exc, ConnectionError):
                    raise
                if asyncio.get_running_loop().time() - started > RECONNECT_BACKOFF[1]:
                    wait = RECONNECT_BACKOFF[0]  # it was up for a while: a new outage starts the backoff over
                outages.record(outages.REDIS, exc, source="worker")
                WORKER_RECONNECTS.labels(dependency=outages.REDIS).inc()
                log.info("rollup worker waits %.0fs for Redis", wait)
                await asyncio.sleep(wait)
                wait = min(wait * 2, RECONNECT_BACKOFF[1])

    async def close(self) -> None:
        """arq's close, once the jobs its signal handler cancelled have ended: arq gathers them bare, so a job
        cancelled at its shielded finish (its result being written) raised CancelledError out of close: the
        shutdown hook never ran and a SIGTERM exited 1."""
        if self._handle_signals:  # the signal handler cancelled what ran: wait until those have ended
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks = {job: task for job, task in self.tasks.items() if not task.done()}
        await super().close()


async def shutdown(ctx: dict[str, Any]) -> None:
    await watchdog.stop()
    await forge_http.close()
    await close_pools()
    await db.dispose_engines()


async def trust_refresh_job(ctx: dict[str, Any]) -> dict[str, int]:
    """Earned trust's new outcomes and the signals they move (app/trust/refresh.py); idempotent, so every worker
    may run it."""
    return await _retrying(ctx, trust.refresh(holder=str(ctx.get("worker_id"))))


async def trust_recompute_job(ctx: dict[str, Any]) -> dict[str, int]:
    """Daily: earned trust from source, and every account's signal counted again."""
    return await _retrying(ctx, trust.recompute(holder=str(ctx.get("worker_id"))))


class WorkerSettings:
    functions = [
        func(drain_dirty_keys, keep_result=60, timeout=600, max_tries=MAX_TRIES),
        func(recompute_windows_job, keep_result=3600, timeout=3 * 3600, max_tries=3),
        func(reconcile_job, keep_result=3600, timeout=12 * 3600, max_tries=3),
        func(shadow_compare_job, keep_result=3600, timeout=600, max_tries=1),
        func(export_job, keep_result=3600, timeout=3 * 3600, max_tries=1),
        func(maintainer_recheck_job, keep_result=3600, timeout=3 * 3600, max_tries=3),
        func(deliver_webhooks, keep_result=60, timeout=300, max_tries=MAX_TRIES),
        func(observe_job, keep_result=3600, timeout=12 * 3600, max_tries=1),
        func(metadata_pending_job, keep_result=3600, timeout=600, max_tries=1),
        func(metadata_refresh_job, keep_result=3600, timeout=3 * 3600, max_tries=3),
        func(evidence_recheck_job, keep_result=60, timeout=300, max_tries=1),
    ]
    cron_jobs = [
        cron(recompute_windows_job, minute=0, timeout=3 * 3600, max_tries=3),
        cron(reconcile_job, hour=3, minute=30, timeout=12 * 3600, max_tries=3),
        cron(sweep_dirty_keys, timeout=600, max_tries=1),
        cron(shadow_compare_job, timeout=600, max_tries=1),  # every minute; runs when its period is due
        cron(export_job, timeout=3 * 3600, max_tries=1),  # every minute; builds when due (daily, after a takedown)
        cron(maintainer_recheck_job, hour=4, minute=45, timeout=3 * 3600, max_tries=3),  # daily
        cron(deliver_webhooks, timeout=300, max_tries=1),  # every minute: the backstop of the rings
        cron(observe_job, hour=5, minute=45, timeout=12 * 3600, max_tries=1),  # daily
        cron(metadata_pending_job, minute=set(range(0, 60, 5)), timeout=600, max_tries=1),
        cron(metadata_refresh_job, hour=5, minute=15, timeout=3 * 3600, max_tries=3),  # daily
        cron(evidence_recheck_job, second={0, 30}, timeout=300, max_tries=1),
        cron(disclosure_clock_job, timeout=300, max_tries=1),  # every minute: due embargoes published
        cron(trust_refresh_job, second=set(range(0, 60, 10)), timeout=60, max_tries=1),  # earned trust, in seconds
        cron(trust_recompute_job, hour=5, minute=30, timeout=3 * 3600, max_tries=1),  # daily: the 365 days slide
    ]
    on_startup = startup
    on_shutdown = shutdown
    timezone = UTC
    max_tries = MAX_TRIES
    max_jobs = 4  # each job holds one database connection at a time
    redis_settings: RedisSettings | None = None


def _watched(name: str, job: WorkerCoroutine) -> WorkerCoroutine:
    """The job, in flight for the event-loop watchdog while it runs (a stall names it)."""

    @functools.wraps(job)
    async def run(ctx: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        with watchdog.in_flight(lambda: f"job {name}"):
            return await job(ctx, *args, **kwargs)

    return run


_jobs: list[Function | CronJob] = [*WorkerSettings.functions, *WorkerSettings.cron_jobs]
for _job in _jobs:
    _job.coroutine = _watched(_job.name, _job.coroutine)


def run_worker(*, burst: bool = False, metrics_port: int | None = None, metrics_host: str = "127.0.0.1") -> int:
    """`tarakan worker [--burst] [--metrics-port PORT]`: run jobs until stopped (or, with --burst, until the queue
    is empty). With a metrics port, the worker's own Prometheus metrics (refresh histograms, errors, drained and
    throttled keys, shadow mismatches, event-loop lag) are served at http://HOST:PORT/metrics from a background
    thread, to the addresses in METRICS_ALLOW."""
    configure_logging()
    WorkerSettings.redis_settings = RedisSettings.from_dsn(settings().redis_url)
    server = None
    if metrics_port is not None:
        try:
            server = start_metrics_server(metrics_port, metrics_host)
        except OSError as exc:
            raise ConfigError(f"cannot serve worker metrics on {metrics_host}:{metrics_port}: {exc.strerror}") from exc
        log.info("worker metrics at http://%s:%d/metrics", metrics_host, server.server_port)
    try:
        asyncio.set_event_loop(asyncio.new_event_loop())  # arq's Worker takes the current loop
        # no connection retries inside arq: SurvivingWorker waits and retries, counted and with a backoff
        WorkerSettings.redis_settings.conn_retries = 0
        SurvivingWorker(**get_kwargs(WorkerSettings), burst=burst).run()  # type: ignore[arg-type]
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return 0
