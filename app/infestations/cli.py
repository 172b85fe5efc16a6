"""`tarakan jobs drain` and `tarakan infestations refresh|recompute-windows|reconcile|backfill|shadow-compare|
cutover-check`: operator commands over the projection, with progress output."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from app.kernel.cli import command
from app.kernel.errors import ValidationError

_KEY = re.compile(r"^[0-9a-f]{64}$")


def _progress(line: str) -> None:
    print(line, flush=True)


async def _jobs_drain(args: argparse.Namespace) -> int:
    from app.infestations.dirty_queue import dirty_backlog, drain_all

    refreshed = await drain_all()
    backlog, _, _ = await dirty_backlog()
    # keys left are backed off after a failure (or claimed by a running worker); the worker retries them
    print(f"drained: {refreshed} keys refreshed, {backlog} left waiting")
    return 0


async def _refresh(args: argparse.Namespace) -> int:
    from app.infestations.projection import refresh_pattern

    key = args.key.strip()
    if not _KEY.match(key):
        raise ValidationError({"pattern_key": ["must be 64 lowercase hexadecimal characters"]})
    instances = await refresh_pattern(key, reason="manual")
    if instances:
        print(f"refreshed {key}: {instances} instances")
    else:
        print(f"refreshed {key}: no public instances, projection deleted")
    return 0


async def _recompute_windows(args: argparse.Namespace) -> int:
    from app.infestations.maintenance import recompute_all_windows

    done = await recompute_all_windows(progress=_progress, ranges=args.ranges)
    print(f"recompute-windows: done, {done} patterns")
    return 0


async def _reconcile(args: argparse.Namespace) -> int:
    from app.infestations.maintenance import reconcile

    summary = await reconcile(progress=_progress)
    print("reconcile: done, " + ", ".join(f"{k}={v}" for k, v in summary.items()))
    return 0


async def _backfill(args: argparse.Namespace) -> int:
    from app.infestations.maintenance import backfill

    await backfill(progress=_progress, concurrency=args.concurrency, ranges=args.ranges)
    return 0


async def _shadow_compare(args: argparse.Namespace) -> int:
    from app.infestations.shadow import shadow_compare_all

    mismatches = await shadow_compare_all()
    for line in mismatches:
        print(f"mismatch: {line}")
    print(f"shadow-compare: {len(mismatches)} mismatches")
    return 1 if mismatches else 0


async def _cutover_check(args: argparse.Namespace) -> int:
    from app.infestations.cutover import cutover_check

    gates = await cutover_check()
    for gate, passed, detail in gates:
        print(f"{'PASS' if passed else 'FAIL'} {gate}: {detail}")
    failed = [gate for gate, passed, _ in gates if not passed]
    print(f"cutover-check: {len(failed)} of {len(gates)} gates failed" if failed else "cutover-check: all gates pass")
    if failed:
        print("tarakan: error: cutover gates failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


def _ranges_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ranges",
        type=int,
        choices=range(1, 257),
        metavar="N",
        help="key ranges to cut the keys into (1-256; default: about 100,000 rows each)",
    )


def register(sub: Any) -> None:
    """Add this feature's subcommands to the `tarakan` parser."""
    jobs = sub.add_parser("jobs", help="background jobs", description="background jobs")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    command(jobs_sub, "drain", _jobs_drain, "run all pending rollup work, then exit")

    inf = sub.add_parser("infestations", help="infestation rollups", description="infestation rollups")
    inf_sub = inf.add_subparsers(dest="infestations_command", required=True, metavar="ACTION")
    refresh = command(inf_sub, "refresh", _refresh, "recompute one pattern key from source")
    refresh.add_argument("key", metavar="KEY", help="pattern key (64 hex)")
    windows = command(inf_sub, "recompute-windows", _recompute_windows, "recompute the 7/30/90/365-day windows")
    _ranges_option(windows)
    command(inf_sub, "reconcile", _reconcile, "re-project every source key, then delete orphan patterns")
    backfill_cmd = command(inf_sub, "backfill", _backfill, "project every key of the public join set, set-based")
    backfill_cmd.add_argument(
        "--concurrency", type=int, default=1, choices=range(1, 17), metavar="N", help="key ranges at once (1-16)"
    )
    _ranges_option(backfill_cmd)
    command(inf_sub, "shadow-compare", _shadow_compare, "compare rollup and legacy reads; exit 1 on any mismatch")
    command(inf_sub, "cutover-check", _cutover_check, "check the hard cutover gates; exit 1 if any fails")
