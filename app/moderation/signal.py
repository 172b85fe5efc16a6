"""A moderator's pin of an account's gate and release of its queue (docs/domain.md "Earned trust"): `gated` or
`open` wins over the signal, `clear` gives the gate back to it; audited (`account.signal_pin`), the stored gate
recounted in the same transaction. A release publishes every finding of the account held for review (one under a
coordinated-disclosure embargo moves to the embargo's hold), audited (`account.held_release`). And the console's
queue of held findings with their reporters' signal."""

from __future__ import annotations

from msgspec import structs
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel import db
from app.kernel.errors import ValidationError
from app.kernel.paging import Page
from app.moderation.rows import ConsoleAccount, SignalledAccount
from app.moderation.service import ActionOutcome, Change, act, lock_other_account, validate_reason_notes
from app.reports.held import release_held
from app.trust.models import PINS
from app.trust.queue import Held, held_page
from app.trust.signal import store_signals

PIN_ACTION = "account.signal_pin"
RELEASE_ACTION = "account.held_release"
PIN_CHOICES = (*PINS, "clear")

_PIN = text("""
INSERT INTO account_signals AS g (account_id, pin, pin_reason) VALUES (:account_id, :pin, :reason)
ON CONFLICT (account_id) DO UPDATE SET pin = EXCLUDED.pin, pin_reason = EXCLUDED.pin_reason, updated_at = now()
""")
_STORED = text("SELECT pin, gated FROM account_signals WHERE account_id = :account_id")


async def pin_signal(actor: Account, handle: str, pin: str, reason: str, notes: str) -> ActionOutcome:
    """Pin the gate of `@handle` (`gated`, `open`) or clear the pin; 422 naming the field for a bad pin, reason or
    notes; a moderator may not pin themselves."""
    errors: dict[str, list[str]] = {}
    if pin not in PIN_CHOICES:
        errors["pin"] = [f"must be one of {', '.join(PIN_CHOICES)}"]
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    handle = handle.strip().lower()

    async def step(session: AsyncSession, actor: Account) -> Change:
        target = await lock_other_account(session, handle, actor, "you cannot pin your own gate")
        stored = (await session.execute(_STORED, {"account_id": target.id})).first()
        before_pin = stored.pin if stored is not None else None
        new_pin = None if pin == "clear" else pin
        if before_pin == new_pin:
            raise ValidationError({"pin": [f"is already {pin if new_pin else 'clear'}"]})
        await session.execute(_PIN, {"account_id": target.id, "pin": new_pin, "reason": reason_t if new_pin else None})
        await store_signals(session, [target.id])
        gated = bool((await session.execute(_STORED, {"account_id": target.id})).one().gated)
        before = {"pin": before_pin or "clear", "gated": bool(stored.gated) if stored is not None else False}
        return Change("account", target.handle, before, {"pin": pin, "gated": gated})

    return await act(actor.id, PIN_ACTION, step, errors=errors, reason=reason_t, notes=notes_t)


# an account's findings held for review now (what a release would publish), by reporter
_HELD_OF = text("""
SELECT s.submitted_by_id AS account_id, count(*) AS held
FROM scan_findings f JOIN scans s ON s.id = f.scan_id
WHERE s.submitted_by_id = ANY(CAST(:ids AS bigint[])) AND f.held_reason = 'low_signal' AND f.published_at IS NULL
GROUP BY s.submitted_by_id
""")


async def release_queue(actor: Account, handle: str, reason: str, notes: str) -> ActionOutcome:
    """Release every finding of `@handle` held for review, in one audited transaction: before the number held, after
    how many were published and how many moved to an embargo's hold. 422 when nothing is held; a moderator may not
    release their own."""
    errors: dict[str, list[str]] = {}
    reason_t, notes_t = validate_reason_notes(reason, notes, errors)
    handle = handle.strip().lower()

    async def step(session: AsyncSession, actor: Account) -> Change:
        target = await lock_other_account(session, handle, actor, "you cannot release your own held findings")
        held = (await session.execute(_HELD_OF, {"ids": [target.id]})).first()
        if held is None:
            raise ValidationError({"handle": [f"@{target.handle} has no finding held for review"]})
        published = await release_held(session, account_id=target.id)
        after = {"held": 0, "published": published, "embargoed": int(held.held) - published}
        return Change("account", target.handle, {"held": int(held.held), "published": 0, "embargoed": 0}, after)

    return await act(actor.id, RELEASE_ACTION, step, errors=errors, reason=reason_t, notes=notes_t)


_SIGNALS = text("""
SELECT account_id, precision, decided, gated, pin FROM account_signals
WHERE account_id = ANY(CAST(:ids AS bigint[]))
""")


async def with_signals(accounts: Page[ConsoleAccount]) -> Page[SignalledAccount]:
    """The console's accounts with their stored signal (a new account: 0.5 of 0 decided, open, no pin)."""
    ids = [a.id for a in accounts["entries"]]
    async with db.read_session(replica=False) as session:
        rows = {int(r.account_id): r for r in await session.execute(_SIGNALS, {"ids": ids})}
        held = {int(r.account_id): int(r.held) for r in await session.execute(_HELD_OF, {"ids": ids})}
    entries = []
    for a in accounts["entries"]:
        row = rows.get(a.id)
        signal = (
            (0.5, 0, False, "clear") if row is None else (row.precision, row.decided, row.gated, row.pin or "clear")
        )
        precision, decided, gated, pin = signal
        entries.append(
            SignalledAccount(
                **structs.asdict(a), precision=precision, decided=decided, gated=gated, pin=pin, held=held.get(a.id, 0)
            )
        )
    return Page(entries=entries, next_cursor=accounts["next_cursor"])


async def held_queue(cursor: str | None) -> Page[Held]:
    """The console's queue: findings held for review, oldest first, each with its reporter's signal (the review
    queue's own query, app/trust/queue.py)."""
    async with db.read_session(replica=False) as session:
        items, next_cursor = await held_page(session, cursor)
    return Page(entries=list(items), next_cursor=next_cursor)
