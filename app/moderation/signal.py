"""A moderator's pin of an account's gate (docs/domain.md "Earned trust"): `gated` or `open` wins over the signal,
`clear` gives the gate back to it; audited (`account.signal_pin`), the stored gate recounted in the same
transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel import db
from app.kernel.errors import Forbidden, NotFound, ValidationError
from app.kernel.paging import Page
from app.moderation.service import ActionOutcome, Change, act, validate_reason_notes
from app.trust.models import PINS
from app.trust.signal import store_signals

PIN_ACTION = "account.signal_pin"
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
        target = (
            await session.execute(select(Account).where(Account.handle == handle).with_for_update())
        ).scalar_one_or_none()
        if target is None:
            raise NotFound({"handle": [f"no account @{handle}"]})
        if target.id == actor.id:
            raise Forbidden({"base": ["you cannot pin your own gate"]})
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


_SIGNALS = text("""
SELECT account_id, precision, decided, gated, pin FROM account_signals
WHERE account_id = ANY(CAST(:ids AS bigint[]))
""")


async def with_signals(accounts: Page[dict[str, Any]]) -> Page[dict[str, Any]]:
    """The console's accounts with their stored signal (a new account: 0.5 of 0 decided, open, no pin)."""
    ids = [int(a["id"]) for a in accounts["entries"]]
    async with db.read_session(replica=False) as session:
        rows = {int(r.account_id): r for r in await session.execute(_SIGNALS, {"ids": ids})}
    entries = []
    for a in accounts["entries"]:
        row = rows.get(int(a["id"]))
        signal = {"precision": 0.5, "decided": 0, "gated": False, "pin": "clear"}
        if row is not None:
            signal = {"precision": row.precision, "decided": row.decided, "gated": row.gated, "pin": row.pin or "clear"}
        entries.append({**a, **signal})
    return Page(entries=entries, next_cursor=accounts["next_cursor"])
