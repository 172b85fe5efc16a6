"""The public join set and the read-time guard (app/record/public.py, docs/domain.md §3 and §5.7) evaluated by
Postgres against real rows: a published occurrence of a public, published report on a listed repository is the only
thing shown, whatever else exists (summary-only, restricted and held reports, held occurrences, quarantined and
pending repositories, hard-deleted reports, NULL ids). Each
condition is built here at test time, so the mutation run of bench/mutation.py reaches it; the consumers' compiled
statements are covered by the SQL-text mutants (bench/sql_mutants.py)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import BigInteger, ColumnElement, Text, Uuid, column, false, literal, select, true
from sqlalchemy import table as _table

from app.kernel import db
from app.record.public import (
    has_public_occurrence,
    listed_repository,
    public_canonical,
    public_join,
    public_occurrence,
    public_scan,
    repositories,
    scan_findings,
    scans,
    shown_pattern,
    visible_occurrence,
    visible_pattern,
    visible_scan,
)
from app.reports.models import Scan
from tests.factories import create_account, create_canonical, create_occurrence, create_repository, create_scan

canonicals = _table("canonical_findings", column("id", BigInteger), column("repository_id", BigInteger))


@dataclass
class World:
    scans: dict[str, int]  # name -> scan id; "shown" is the one public report on a listed repository
    occurrences: dict[str, uuid.UUID]  # name -> public id of the occurrence in that scan
    canonicals: dict[str, int]  # name -> canonical id
    repositories: dict[str, int]


async def _world() -> World:
    account = await create_account()
    listed = await create_repository()
    quarantined = await create_repository(listing_status="quarantined")
    pending = await create_repository(listing_status="pending")
    made: dict[str, tuple[Scan, Any]] = {}
    for name, repository, visibility in [
        ("shown", listed, "public"),
        ("summary", listed, "public_summary"),
        ("restricted", listed, "restricted"),
        ("quarantined", quarantined, "public"),
        ("pending", pending, "public"),
        ("held", listed, "public"),  # its report held back by a gate (evidence pending)
        ("gated", listed, "public"),  # a published report, its occurrence held back
    ]:
        scan = await create_scan(repository, account, visibility=visibility)
        canonical = await create_canonical(repository, f"{name} finding")
        occurrence = await create_occurrence(scan, canonical)
        made[name] = (scan, (canonical, occurrence))
    async with db.transaction() as session:
        await session.execute(scans.update().where(scans.c.id == made["held"][0].id).values(published_at=None))
        gated = made["gated"][1][1].id
        await session.execute(scan_findings.update().where(scan_findings.c.id == gated).values(published_at=None))
    return World(
        scans={name: scan.id for name, (scan, _) in made.items()},
        occurrences={name: pair[1].public_id for name, (_, pair) in made.items()},
        canonicals={name: pair[0].id for name, (_, pair) in made.items()},
        repositories={"listed": listed.id, "quarantined": quarantined.id, "pending": pending.id},
    )


async def _value(condition: ColumnElement[bool]) -> bool:
    async with db.read_session() as session:
        return bool((await session.execute(select(condition))).scalar_one())


async def test_a_report_is_visible_only_public_on_a_listed_repository() -> None:
    world = await _world()
    for name, scan_id in world.scans.items():
        assert await _value(visible_scan(literal(scan_id, BigInteger))) is (name in ("shown", "gated")), name
    assert await _value(visible_scan(literal(None, BigInteger))) is False
    assert await _value(visible_scan(literal(max(world.scans.values()) + 1, BigInteger))) is False


async def test_an_occurrence_is_visible_only_in_a_visible_report() -> None:
    world = await _world()
    for name, public_id in world.occurrences.items():
        assert await _value(visible_occurrence(literal(public_id, Uuid))) is (name == "shown"), name
    assert await _value(visible_occurrence(literal(uuid.uuid4(), Uuid))) is False
    # per row of an enclosing statement (a membership list): each sample judged on its own
    o = scan_findings.alias("o")
    async with db.read_session() as session:
        rows = await session.execute(select(o.c.public_id, visible_occurrence(o.c.public_id)))
        judged: dict[uuid.UUID, bool] = {row[0]: row[1] for row in rows}
    assert judged == {public_id: name == "shown" for name, public_id in world.occurrences.items()}


async def test_an_occurrence_is_in_the_join_set_only_published_in_a_public_report() -> None:
    world = await _world()
    f, s, r = scan_findings.alias("f"), scans.alias("s"), repositories.alias("r")
    async with db.read_session() as session:
        rows = await session.execute(
            select(f.c.public_id, public_occurrence(f, s, r))
            .join(s, s.c.id == f.c.scan_id)
            .join(r, r.c.id == s.c.repository_id)
        )
        judged: dict[uuid.UUID, bool] = {row[0]: row[1] for row in rows}
    assert judged == {public_id: name == "shown" for name, public_id in world.occurrences.items()}


async def test_the_join_set_is_public_reports_on_listed_repositories() -> None:
    world = await _world()
    s, r = scans.alias("s"), repositories.alias("r")
    async with db.read_session() as session:
        rows = await session.execute(
            select(s.c.id, public_join(s, r), public_scan(s), listed_repository(r)).join(r, r.c.id == s.c.repository_id)
        )
        by_id = {row[0]: tuple(row[1:]) for row in rows}
    names = {scan_id: name for name, scan_id in world.scans.items()}
    assert {names[i]: flags for i, flags in by_id.items()} == {
        "shown": (True, True, True),
        "summary": (False, False, True),
        "restricted": (False, False, True),
        "quarantined": (False, True, False),
        "pending": (False, True, False),
        "held": (False, False, True),
        "gated": (True, True, True),
    }


async def test_a_canonical_counts_once_public_whatever_its_listing_and_in_the_rollups_only_when_listed() -> None:
    world = await _world()
    c, r = canonicals.alias("c"), repositories.alias("r")
    async with db.read_session() as session:
        default: dict[int, bool] = {
            row[0]: row[1] for row in await session.execute(select(c.c.id, has_public_occurrence()))
        }
        given: dict[int, bool] = {
            row[0]: row[1] for row in await session.execute(select(c.c.id, has_public_occurrence(c.c.id)))
        }
        rollup: dict[int, bool] = {
            row[0]: row[1]
            for row in await session.execute(
                select(c.c.id, public_canonical(r, c.c.id)).join(r, r.c.id == c.c.repository_id)
            )
        }
    names = {canonical_id: name for name, canonical_id in world.canonicals.items()}
    public_anywhere = {"shown", "quarantined", "pending"}
    assert {names[i]: v for i, v in default.items()} == {n: n in public_anywhere for n in world.canonicals}
    assert given == default
    assert {names[i]: v for i, v in rollup.items()} == {n: n == "shown" for n in world.canonicals}


async def test_the_rollup_condition_judges_the_canonical_it_is_given() -> None:
    world = await _world()
    k, r = canonicals.alias("k"), repositories.alias("r")  # not the default alias "c"
    async with db.read_session() as session:
        rows = await session.execute(select(k.c.id, public_canonical(r, k.c.id)).join(r, r.c.id == k.c.repository_id))
        judged: dict[int, bool] = {row[0]: row[1] for row in rows}
    assert judged == {canonical_id: name == "shown" for name, canonical_id in world.canonicals.items()}


async def test_a_canonical_with_a_second_public_occurrence_counts_once() -> None:
    world = await _world()
    account = await create_account()
    listed = await create_repository()
    scan = await create_scan(listed, account)
    canonical = await create_canonical(listed, "twice")
    await create_occurrence(scan, canonical, position=0)
    second = await create_scan(listed, account)
    await create_occurrence(second, canonical, position=0)
    c = canonicals.alias("c")
    async with db.read_session() as session:
        rows = (await session.execute(select(c.c.id).where(has_public_occurrence()))).scalars().all()
    public_anywhere = [world.canonicals[name] for name in ("shown", "quarantined", "pending")]
    assert sorted(rows) == sorted([canonical.id, *public_anywhere])  # once each, not once per occurrence


pattern_instances = _table(
    "infestation_pattern_instances",
    column("canonical_finding_id", BigInteger),
    column("pattern_key", Text),
    column("repository_id", BigInteger),
    column("status", Text),
    column("title", Text),
    column("sample_scan_id", BigInteger),
    column("inserted_at"),
    column("updated_at"),
)


async def test_a_pattern_is_shown_while_one_instance_sample_is_visible() -> None:
    world = await _world()
    samples = {
        "p-shown": ["summary", "shown"],
        "p-hidden": ["restricted", "quarantined", "pending", "held"],
        "p-none": [],
    }
    async with db.transaction() as session:
        for key, names in samples.items():
            for name in names:
                await session.execute(
                    pattern_instances.insert().values(
                        canonical_finding_id=world.canonicals[name],
                        pattern_key=key,
                        repository_id=world.repositories["listed"],
                        status="open",
                        title=key,
                        sample_scan_id=world.scans[name],
                        inserted_at=db_now(),
                        updated_at=db_now(),
                    )
                )
    for key in samples:
        assert await _value(visible_pattern(literal(key, Text))) is (key == "p-shown"), key
        assert await _value(shown_pattern(literal(key, Text), false())) is (key == "p-shown"), key
        assert await _value(shown_pattern(literal(key, Text), true())) is True, key
    # per row of an enclosing statement (the ranked list): each key judged on its own instances
    o = pattern_instances.alias("o")
    async with db.read_session() as session:
        rows = await session.execute(select(o.c.pattern_key, visible_pattern(o.c.pattern_key)).distinct())
        assert {row[0]: row[1] for row in rows} == {"p-shown": True, "p-hidden": False}


def db_now() -> ColumnElement[Any]:
    from sqlalchemy import func

    return func.now()


@pytest.mark.parametrize("visibility", ["public_summary", "restricted"])
async def test_a_takedown_to_a_lesser_visibility_hides_the_report_at_once(visibility: str) -> None:
    world = await _world()
    shown = literal(world.scans["shown"], BigInteger)
    assert await _value(visible_scan(shown)) is True
    async with db.transaction() as session:
        await session.execute(scans.update().where(scans.c.id == world.scans["shown"]).values(visibility=visibility))
    assert await _value(visible_scan(shown)) is False
    async with db.transaction() as session:
        await session.execute(scans.update().where(scans.c.id == world.scans["shown"]).values(visibility="public"))
        await session.execute(
            repositories.update()
            .where(repositories.c.id == world.repositories["listed"])
            .values(listing_status="quarantined")
        )
    assert await _value(visible_scan(shown)) is False
