"""The runtime rollup flag lives in the database (docs/domain.md §13 "Feature flag and Cutover gates"): without a
row the environment's default holds; `tarakan flags set|unset|show` write, remove and show it, audited; turning rollup
reads on refuses while a cutover gate fails unless --force; two running web processes follow a change within 2 s."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time

import httpx
import pytest
from sqlalchemy import text

from app.cli import build_parser
from app.infestations import maintenance
from app.kernel import db, flags
from tests import factories
from tests.harness import CliResult, assert_one_line_error, start_server, stop, tarakan
from tests.infestations.support import build_registry

FLAG = flags.READ_FROM_ROLLUP


async def cli(*argv: str) -> CliResult:
    """`tarakan ARGV` in this process (its handler, as `app.cli.main` runs it): a subprocess per call would cost
    about 1.5 s of interpreter start; the two-process test below runs the real command line."""
    args = build_parser().parse_args(list(argv))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = await args.handler(args)
    return CliResult(code, out.getvalue(), err.getvalue())


async def audit_rows() -> list[tuple[int | None, str, str, object, object, str]]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(
            text("SELECT actor_id, action, subject_id, before, after, notes FROM audit_events ORDER BY id")
        )
        return [tuple(r) for r in rows.all()]


async def settings_rows() -> list[tuple[str, object]]:
    async with db.read_session(replica=False) as session:
        return [tuple(r) for r in (await session.execute(text("SELECT name, value FROM runtime_settings"))).all()]


async def test_without_a_row_the_environment_default_holds_and_a_row_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert await settings_rows() == []  # migrations never write the flag
    monkeypatch.setenv("INFESTATIONS_READ_FROM_ROLLUP", "false")
    assert await flags.read_from_rollup() is False
    monkeypatch.setenv("INFESTATIONS_READ_FROM_ROLLUP", "true")
    assert await flags.read_from_rollup() is True  # the default is read at every call
    await flags.set_flag(FLAG, False, actor_id=None, notes="test")
    assert await flags.read_from_rollup() is False  # the row wins over the environment
    await flags.set_flag(FLAG, None, actor_id=None, notes="test")
    assert await settings_rows() == []
    assert await flags.read_from_rollup() is True


async def test_a_change_made_elsewhere_is_seen_within_a_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flags, "POLL_SECONDS", 0.3)
    assert await flags.read_from_rollup() is True
    async with db.transaction() as session:  # another process's `flags set`: this one's cache is not told
        await session.execute(text("""INSERT INTO runtime_settings (name, value) VALUES (:n, 'false')"""), {"n": FLAG})
    assert await flags.read_from_rollup() is True  # polled a moment ago
    await asyncio.sleep(0.35)
    assert await flags.read_from_rollup() is False


async def test_cli_set_show_unset_audited_as_the_operator_or_as_an_account() -> None:
    mod = await factories.create_account(email="ops@example.com")
    shown = await cli("flags", "show")
    assert shown.code == 0 and shown.out == f"{FLAG} = true (not set: the environment's default)\n"

    off = await cli("flags", "set", FLAG, "false")
    assert off.code == 0 and off.out.startswith(f"{FLAG} = false (audit event "), off
    assert (await cli("flags", "show")).out.startswith(f"{FLAG} = false (set ")
    unset = await cli("flags", "unset", FLAG, "--as", "ops@example.com")
    assert unset.code == 0 and "the environment's default (true) holds" in unset.out
    assert await settings_rows() == []

    events = await audit_rows()
    assert [(e[0], e[1], e[2], e[3], e[4]) for e in events] == [
        (None, "flag.set", FLAG, {"value": None}, {"value": False}),
        (mod.id, "flag.unset", FLAG, {"value": False}, {"value": None}),
    ]
    assert events[0][5].startswith("tarakan flags, operator ")
    assert events[1][5] == "tarakan flags, as ops@example.com"


async def test_turning_rollup_reads_on_refuses_while_a_gate_fails_unless_forced() -> None:
    # an empty registry fails one gate: no reconcile recorded
    refused = await cli("flags", "set", FLAG, "true")
    assert_one_line_error(refused, "cutover gate 'recent reconcile' fails: no finished reconcile run recorded")
    assert "--force" in refused.err
    assert await settings_rows() == [] and await audit_rows() == []

    forced = await cli("flags", "set", FLAG, "true", "--force")
    assert forced.code == 0, forced
    assert await settings_rows() == [(FLAG, True)]
    assert (await audit_rows())[0][5].endswith("(--force)")

    await maintenance.reconcile()  # every gate passes now
    assert (await cli("flags", "set", FLAG, "false")).code == 0
    assert (await cli("flags", "set", FLAG, "true")).code == 0


async def test_two_web_processes_follow_a_change_within_two_seconds() -> None:
    """The rollups are wiped after the build, so the two paths answer differently: the rollup list is empty, the
    legacy aggregate (read from source) is not."""
    await build_registry()
    await maintenance.backfill(progress=None)
    legacy_keys = {str(i["pattern_key"]) for i in await _legacy_items()}
    assert legacy_keys
    async with db.transaction() as session:
        await session.execute(
            text("TRUNCATE infestation_pattern_instances, infestation_pattern_repos, infestation_patterns")
        )
    servers = await asyncio.gather(*(asyncio.to_thread(start_server, quiet=True) for _ in range(2)))
    bases = [base for _, base in servers]
    try:
        assert [await _keys(b) for b in bases] == [set(), set()]  # rollup reads (the default)

        assert (await tarakan("flags", "set", FLAG, "false")).code == 0
        took = await _until(bases, legacy_keys)
        print(f"switch to legacy seen by both processes after {took:.2f} s")
        assert took < 2.0

        refused = await cli("flags", "set", FLAG, "true")  # the wiped rollups fail the coverage gate
        assert_one_line_error(refused, "cutover gate 'backfill coverage' fails")
        assert [await _keys(b) for b in bases] == [legacy_keys, legacy_keys]

        assert (await cli("flags", "set", FLAG, "true", "--force")).code == 0
        assert await _until(bases, set()) < 2.0
    finally:
        for proc, _ in servers:
            await asyncio.to_thread(stop, proc)


async def _legacy_items() -> list[dict[str, object]]:
    from app.infestations.legacy import ranked_legacy
    from app.infestations.rows import InfestationFilters

    return await ranked_legacy(InfestationFilters.of(days=30, min_repos=2, status=None, limit=50, rollup=False))


async def _keys(base: str) -> set[str]:
    async with httpx.AsyncClient() as client:
        body = (await client.get(f"{base}/infestations.json")).json()
    return {item["pattern_key"] for item in body["items"]}


async def _until(bases: list[str], expected: set[str]) -> float:
    """Seconds until every process answers `expected` (fails past 5 s)."""
    started = time.monotonic()
    while True:
        if all([await _keys(b) == expected for b in bases]):
            return time.monotonic() - started
        assert time.monotonic() - started < 5, json.dumps([sorted(await _keys(b)) for b in bases])
        await asyncio.sleep(0.05)
