"""The `tarakan` command line: each feature registers its subcommands; a failure prints one line and exits 1
(docs/operations.md "Command line failures")."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from app.kernel.cli import Handler, command, group
from app.kernel.config import (
    ConfigError,
    check_forge_settings,
    forwarded_allow_ips,
    maintainer_recheck_hours,
    metrics_allow,
    search_rate_per_minute,
    server_timing,
    settings,
    varnish_purge_timeout,
    varnish_purge_urls,
    webhook_allow_private,
)
from app.kernel.errors import DomainError

log = logging.getLogger("tarakan.cli")


async def _run_async(handler: Handler, args: argparse.Namespace) -> int:
    from app.kernel import db
    from app.kernel.queue import close_pools

    try:
        result = handler(args)
        if not isinstance(result, int):
            result = await result
        return result
    finally:
        try:
            await close_pools()
            await db.dispose_engines()
        except Exception as exc:  # closing a pool to a server that went away must not mask the real error
            log.debug("closing pools failed: %s", exc)


def _port(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 0 <= int(raw) <= 65535:
        raise ConfigError(f"{name} must be a TCP port number, got {raw!r}")
    return int(raw)


async def _check_schema() -> None:
    """Refuse a database whose schema is behind the code (docs/operations.md "Deploy and migrate")."""
    from app.kernel import db
    from app.ops.schema import schema_state

    try:
        state = await schema_state()
    finally:
        await db.dispose_engines()
    if not state.ok:
        raise ConfigError(state.describe())
    if state.state == "ahead":
        log.warning(state.describe())


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.kernel.logs import PROCESS_LOG_CONFIG, configure_logging
    from app.kernel.metrics import multiprocess_metrics

    settings()  # DATABASE_URL and REDIS_URL are required before anything listens
    _check_limits()
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    configure_logging()
    asyncio.run(_check_schema())
    # N processes share the port (uvicorn's supervisor restarts one that dies); /metrics sums over them
    with multiprocess_metrics(args.workers):
        # our logging (LOG_FORMAT) and our access line (route, status, duration, request id) replace uvicorn's;
        # the app resolves forwarded headers itself (app.kernel.addresses: it warns about untrusted peers)
        uvicorn.run(
            "app.main:app", host=args.host, port=args.port, workers=args.workers, proxy_headers=False,
            log_config=PROCESS_LOG_CONFIG if args.workers > 1 else None, access_log=False,
        )  # fmt: skip
    return 0


def _check_limits() -> None:
    """The address, rate and forge settings are refused at start, not at the first request that reads them."""
    metrics_allow()
    forwarded_allow_ips()
    search_rate_per_minute()
    server_timing()
    check_forge_settings()
    maintainer_recheck_hours()
    webhook_allow_private()
    varnish_purge_urls()
    varnish_purge_timeout()


def _worker(args: argparse.Namespace) -> int:
    from jobs.worker import run_worker

    settings()
    _check_limits()
    asyncio.run(_check_schema())  # a worker on a database without its migrations would fail job by job
    port = args.metrics_port if args.metrics_port is not None else _port("WORKER_METRICS_PORT")
    return run_worker(burst=args.burst, metrics_port=port, metrics_host=args.metrics_host)


def _migrate(args: argparse.Namespace) -> int:
    from app.migrate import upgrade_to_head

    settings()
    upgrade_to_head()
    print("migrated to head")
    return 0


def infrastructure_failure(exc: BaseException) -> str | None:
    """One line naming what failed (database, Redis, a port) and why, for the errors operators meet; None for
    anything else (a bug keeps its traceback)."""
    import psycopg
    import redis.exceptions
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import make_url

    def first_line(error: BaseException) -> str:
        text = str(error).strip().splitlines()
        return text[0] if text else type(error).__name__

    def database() -> str:
        try:
            return make_url(os.environ.get("DATABASE_URL", "")).render_as_string(hide_password=True)
        except Exception:
            return "DATABASE_URL"

    if isinstance(exc, sa_exc.ArgumentError):
        return f"DATABASE_URL is not a valid database URL: {first_line(exc)}"
    if isinstance(exc, sa_exc.DBAPIError) and isinstance(
        exc.orig, psycopg.OperationalError | psycopg.errors.InsufficientPrivilege
    ):
        return f"database {database()} failed: {first_line(exc.orig)}"
    if isinstance(
        exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError | psycopg.OperationalError
    ):
        return f"database {database()} failed: {first_line(exc)}"
    if isinstance(exc, redis.exceptions.RedisError):
        return f"redis {_redis_location()} failed: {first_line(exc)}"
    if isinstance(exc, OSError | TimeoutError):
        return f"{first_line(exc)}"
    return None


def _redis_location() -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(os.environ.get("REDIS_URL", ""))
    return f"{parts.hostname}:{parts.port}" if parts.hostname else "REDIS_URL"


async def _jobs_drain(args: argparse.Namespace) -> int:
    """`tarakan jobs drain`: the rollups' pending work, then earned trust's (what the worker does after commits)."""
    from app.infestations.cli import drain_rollups
    from app.trust.refresh import refresh

    code = await drain_rollups(args)
    result = await refresh()
    print(f"earned trust: {result['accounts']} accounts counted")
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tarakan", description="Tarakan registry and infestation atlas")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = command(sub, "serve", _serve, "serve the web app")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    serve.add_argument(
        "--workers", type=int, default=1, metavar="N", help="server processes on the one port (default: 1)"
    )
    worker = command(sub, "worker", _worker, "run the arq worker")
    worker.add_argument("--burst", action="store_true", help="run queued jobs, then exit")
    worker.add_argument(
        "--metrics-port", type=int, default=None, metavar="PORT",
        help="serve this worker's Prometheus metrics at http://HOST:PORT/metrics (default: $WORKER_METRICS_PORT)",
    )  # fmt: skip
    worker.add_argument(
        "--metrics-host", default=os.environ.get("WORKER_METRICS_HOST", "127.0.0.1"), metavar="HOST",
        help="address of the metrics listener (default: $WORKER_METRICS_HOST or 127.0.0.1)",
    )  # fmt: skip
    command(sub, "migrate", _migrate, "apply database migrations")
    command(group(sub, "jobs", "background jobs"), "drain", _jobs_drain, "run all pending rollup work, then exit")

    from app.accounts.cli import register as register_accounts
    from app.disclosure.cli import register as register_disclosures
    from app.evidence.cli import register as register_evidence
    from app.exports.cli import register as register_exports
    from app.infestations.cli import register as register_infestations
    from app.maintainers.cli import register as register_maintainers
    from app.maintainers.statement_cli import register as register_statements
    from app.moderation.cli import register as register_moderation
    from app.registry.cli import register as register_registry
    from app.reports.cli import register as register_reports
    from app.seed import register as register_seed
    from app.trust.cli import register as register_trust

    for register in (
        register_accounts,
        register_registry,
        register_seed,
        register_reports,
        register_moderation,
        register_infestations,
        register_maintainers,
        register_statements,
        register_exports,
        register_evidence,
        register_trust,
        register_disclosures,
    ):
        register(sub)
    return parser


SYNC_COMMANDS = {"serve", "worker", "migrate"}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command in SYNC_COMMANDS:
            result = args.handler(args)
            assert isinstance(result, int)
            return result
        return asyncio.run(_run_async(args.handler, args))
    except (DomainError, ConfigError) as exc:
        print(f"tarakan: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        line = infrastructure_failure(exc)
        if line is None:
            raise
        print(f"tarakan: error: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
