"""The `tarakan` command line. Each feature registers its own subcommands; failures print one line and exit 1."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from app.kernel.cli import Handler, command
from app.kernel.config import ConfigError
from app.kernel.errors import DomainError


async def _run_async(handler: Handler, args: argparse.Namespace) -> int:
    from app.kernel import db
    from jobs.queue import close_pools

    try:
        result = handler(args)
        if not isinstance(result, int):
            result = await result
        return result
    finally:
        await close_pools()
        await db.dispose_engines()


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    uvicorn.run("app.main:app", host=args.host, port=args.port, proxy_headers=True, log_level="info")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from jobs.worker import run_worker

    return run_worker(burst=args.burst)


def _migrate(args: argparse.Namespace) -> int:
    from app.migrate import upgrade_to_head

    upgrade_to_head()
    print("migrated to head")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tarakan", description="Tarakan registry and infestation atlas")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = command(sub, "serve", _serve, "serve the web app")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    worker = command(sub, "worker", _worker, "run the arq worker")
    worker.add_argument("--burst", action="store_true", help="run queued jobs, then exit")
    command(sub, "migrate", _migrate, "apply database migrations")

    from app.accounts.cli import register as register_accounts
    from app.infestations.cli import register as register_infestations
    from app.moderation.cli import register as register_moderation
    from app.registry.cli import register as register_registry
    from app.reports.cli import register as register_reports
    from app.seed import register as register_seed

    for register in (
        register_accounts,
        register_registry,
        register_seed,
        register_reports,
        register_moderation,
        register_infestations,
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


if __name__ == "__main__":
    sys.exit(main())
