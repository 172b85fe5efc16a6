"""`tarakan jobs drain`, `tarakan infestations refresh|recompute-windows|reconcile|backfill|shadow-compare|
cutover-check` and `tarakan flags set|unset|show`: operator commands over the projection, with progress output."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from app.kernel.cli import command, group
from app.kernel.errors import ValidationError

_KEY = re.compile(r"^[0-9a-f]{64}$")


def _progress(line: str) -> None:
    print(line, flush=True)


async def drain_rollups(args: argparse.Namespace) -> int:
    """The rollups' half of `tarakan jobs drain` (registered by the composition root, app/cli.py)."""
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


_TRUTH = {"true": True, "on": True, "1": True, "false": False, "off": False, "0": False}


async def _flag_actor(args: argparse.Namespace) -> tuple[int | None, str]:
    """Who the audit names: the account of `--as EMAIL`, or the operator at this command line."""
    import getpass

    if args.as_email:
        from app.accounts.service import require_account_by_email

        account = await require_account_by_email(args.as_email)
        return int(account.id), f"tarakan flags, as {account.email}"
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (a container without one)
        user = "unknown"
    return None, f"tarakan flags, operator {user}"


async def _flags_set(args: argparse.Namespace) -> int:
    import logging

    from app.infestations.cutover import first_failing_gate
    from app.kernel import flags

    value = _TRUTH[args.value]
    if value and args.name == flags.READ_FROM_ROLLUP and not args.force:
        # one line names the gate; the mismatches the shadow-compare logs one by one are cutover-check's to show
        logging.getLogger("app.infestations.shadow").setLevel(logging.ERROR)
        failed = await first_failing_gate()
        if failed is not None:
            gate, _, detail = failed
            print(
                f"tarakan: error: refusing to turn {args.name} on: cutover gate {gate!r} fails: {detail}; "
                "see `tarakan infestations cutover-check`, or pass --force",
                file=sys.stderr,
            )
            return 1
    actor_id, notes = await _flag_actor(args)
    event = await flags.set_flag(
        args.name, value, actor_id=actor_id, notes=notes + (" (--force)" if args.force else "")
    )
    print(f"{args.name} = {str(value).lower()} (audit event {event}; every web process follows within 2 s)")
    return 0


async def _flags_unset(args: argparse.Namespace) -> int:
    from app.kernel import flags

    actor_id, notes = await _flag_actor(args)
    event = await flags.set_flag(args.name, None, actor_id=actor_id, notes=notes)
    default = str(flags.DEFAULTS[args.name]()).lower()
    print(f"{args.name} unset: the environment's default ({default}) holds (audit event {event})")
    return 0


async def _flags_show(args: argparse.Namespace) -> int:
    from app.kernel import flags

    rows = await flags.stored()
    for name, default in flags.DEFAULTS.items():
        if name in rows:
            value, updated_at = rows[name]
            print(f"{name} = {str(bool(value)).lower()} (set {updated_at.isoformat()})")
        else:
            print(f"{name} = {str(default()).lower()} (not set: the environment's default)")
    return 0


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
    inf_sub = group(sub, "infestations", "infestation rollups")
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

    from app.kernel.flags import DEFAULTS

    flag_sub = group(sub, "flags", "runtime flags, followed by every process without a restart")
    flag_set = command(flag_sub, "set", _flags_set, "set a runtime flag (audited)")
    flag_set.add_argument("name", choices=sorted(DEFAULTS), metavar="NAME", help=", ".join(sorted(DEFAULTS)))
    flag_set.add_argument("value", choices=sorted(_TRUTH), metavar="true|false")
    flag_set.add_argument("--force", action="store_true", help="turn rollup reads on even while a cutover gate fails")
    flag_set.add_argument("--as", dest="as_email", metavar="EMAIL", help="the account the audit names")
    flag_unset = command(flag_sub, "unset", _flags_unset, "remove a runtime flag: the environment's default holds")
    flag_unset.add_argument("name", choices=sorted(DEFAULTS), metavar="NAME")
    flag_unset.add_argument("--as", dest="as_email", metavar="EMAIL", help="the account the audit names")
    command(flag_sub, "show", _flags_show, "show every runtime flag and where its value comes from")
