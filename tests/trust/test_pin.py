"""A moderator's pin of an account's gate (issue 38 item 3): gated, open and cleared, each audited, the stored gate
following in the same action; bad fields 422, non-moderators 403, nobody pins themselves; the console shows it."""

from __future__ import annotations

import json
from typing import Any

import httpx
from sqlalchemy import text

from app.kernel import db
from tests.harness import tarakan
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as, make_account


async def _stored(account_id: int) -> Any:
    async with db.read_session(replica=False) as session:
        return (
            await session.execute(
                text("SELECT pin, pin_reason, gated FROM account_signals WHERE account_id = :id"), {"id": account_id}
            )
        ).first()


async def _pin_events() -> list[tuple[Any, ...]]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(
            text("SELECT subject_id, before, after, reason FROM audit_events WHERE action = 'account.signal_pin'")
        )
        return [tuple(r) for r in rows]


def _form(pin: str, reason: str = "pinned after review") -> dict[str, str]:
    return {"pin": pin, "reason": reason, "notes": NOTES}


async def test_pin_gated_then_open_then_clear_audited_and_the_gate_follows(client: httpx.AsyncClient) -> None:
    moderator = await make_account("mod", platform_role="moderator")
    agent = await make_account("agent")
    await act_as(client, moderator)

    gated = await client.post("/moderation/accounts/agent/signal", data=_form("gated"), headers=SAME_ORIGIN)
    assert gated.status_code == 303
    assert tuple(await _stored(agent.id)) == ("gated", "pinned after review", True)
    page = await client.get("/moderation/accounts")
    assert "held (pinned gated)" in page.text and "account-signal-" in page.text

    opened = await client.post("/moderation/accounts/agent/signal", data=_form("open"), headers=SAME_ORIGIN)
    assert opened.status_code == 303
    assert (await _stored(agent.id)).gated is False

    cleared = await client.post("/moderation/accounts/agent/signal", data=_form("clear"), headers=SAME_ORIGIN)
    assert cleared.status_code == 303
    assert tuple(await _stored(agent.id)) == (None, None, False)

    events = await _pin_events()
    assert [(e[0], e[1]["pin"], e[2]["pin"], e[2]["gated"]) for e in events] == [
        ("agent", "clear", "gated", True),
        ("agent", "gated", "open", False),
        ("agent", "open", "clear", False),
    ]


async def test_bad_fields_422_non_moderator_403_and_no_self_pin(client: httpx.AsyncClient) -> None:
    moderator = await make_account("mod", platform_role="moderator")
    member = await make_account("agent")
    await act_as(client, moderator)
    bad = await client.post("/moderation/accounts/agent/signal", data=_form("banned", "x"), headers=SAME_ORIGIN)
    assert bad.status_code == 422
    assert "must be one of gated, open, clear" in bad.text and "must be 3 to 100 characters" in bad.text
    own = await client.post("/moderation/accounts/mod/signal", data=_form("open"), headers=SAME_ORIGIN)
    assert own.status_code == 403 and "cannot pin your own gate" in own.text

    await act_as(client, member)
    refused = await client.post("/moderation/accounts/mod/signal", data=_form("gated"), headers=SAME_ORIGIN)
    assert refused.status_code == 403
    assert await _stored(moderator.id) is None and await _stored(member.id) is None
    assert await _pin_events() == []


async def test_tarakan_moderate_signal_pins_from_the_command_line() -> None:
    moderator = await make_account("mod", platform_role="moderator")
    agent = await make_account("agent")
    common = ["--reason", "pinned after review", "--notes", NOTES, "--as", moderator.email]
    done = await tarakan("moderate", "signal", "--handle", "agent", "--pin", "gated", *common)
    assert done.code == 0, done.err
    assert json.loads(done.out.splitlines()[0])["after"] == {"pin": "gated", "gated": True}
    assert (await _stored(agent.id)).gated is True
