"""The daily recheck and a forge that will not give the file (issue 34, docs/domain.md "Maintainers"): a redirect or
401 (or a 403 that is not the forge's rate limit) on three rechecks at least MAINTAINER_RECHECK_HOURS apart ends the
maintainership as `proof_unreachable`; a rate-limited 403 or 429 is the forge failing and counts nothing; any
answer with the file ends the streak. The forge is a loopback server."""

from __future__ import annotations

import httpx

from app.maintainers import recheck
from tests.conftest import reset_rate_counters
from tests.maintainers.statement_support import published, verified_maintainer
from tests.maintainers.support import Answer, Forge
from tests.sql import execute, one, scalar


async def streak() -> dict[str, object]:
    row = await one(
        "SELECT unreachable_checks, first_unreachable_at IS NOT NULL AS started, ended_reason "
        "FROM repository_maintainers"
    )
    assert row is not None
    return dict(row)


async def a_day_later() -> None:
    """Every streak started a day earlier (25 hours: one more recheck may count)."""
    await execute("UPDATE repository_maintainers SET first_unreachable_at = first_unreachable_at - interval '25 hours'")


async def test_a_redirect_or_401_that_persists_ends_the_maintainership(client: httpx.AsyncClient, forge: Forge) -> None:
    p = await published()
    keeper = await verified_maintainer(forge, p.repository, handle="keeper")
    path = forge.path_of(p.repository.host, p.repository.owner, p.repository.name)
    token_file = forge.answers[path]

    # the forge's rate limit is the forge failing: nothing counts, however long
    for limited in (
        Answer(403, headers={"X-RateLimit-Remaining": "0"}),
        Answer(429, headers={"Retry-After": "60"}),
        Answer(403, headers={"Retry-After": "60"}),
    ):
        reset_rate_counters()  # the time the forge said to wait has passed (app.forge.http keeps its "stop until")
        forge.answers[path] = limited
        assert await recheck.recheck_maintainers() == []
        assert await streak() == {"unreachable_checks": 0, "started": False, "ended_reason": None}

    # a redirect: counted once a day, however often the recheck runs
    reset_rate_counters()
    forge.answers[path] = Answer(302, headers={"Location": "https://elsewhere.example/"})
    assert await recheck.recheck_maintainers() == []
    assert await recheck.recheck_maintainers() == []
    assert await streak() == {"unreachable_checks": 1, "started": True, "ended_reason": None}
    # a day later a 401: the second
    await a_day_later()
    forge.answers[path] = Answer(401)
    assert await recheck.recheck_maintainers() == []
    assert (await streak())["unreachable_checks"] == 2
    # the file is back: the streak ends
    forge.answers[path] = token_file
    assert await recheck.recheck_maintainers() == []
    assert await streak() == {"unreachable_checks": 0, "started": False, "ended_reason": None}

    # three days of refusals (a plain 403 counts: the forge answered, and not its rate limit) end it
    forge.answers[path] = Answer(403)
    assert await recheck.recheck_maintainers() == []
    await a_day_later()
    forge.answers[path] = Answer(301, headers={"Location": "/moved"})
    assert await recheck.recheck_maintainers() == []
    await a_day_later()
    forge.answers[path] = Answer(401)
    ended = await recheck.recheck_maintainers()
    assert [(e.handle, e.reason) for e in ended] == [(keeper.handle, "proof_unreachable")]
    assert (await streak())["ended_reason"] == "proof_unreachable"
    assert await scalar("SELECT participation_mode FROM repositories") == "unclaimed"
    record = (await client.get(f"/repos/{p.slug}.json")).json()
    assert record["maintainers"] == []
