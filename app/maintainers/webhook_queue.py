"""The webhook delivery queue: the fan-out of change-feed entries into one delivery row per entry and webhook (one
head a webhook), the lease of a due head, and the settle of an attempt (docs/domain.md §14 "Webhooks"); the writer of
`webhook_deliveries` and `webhook_fanout` and of a webhook's delivery state, beside `webhooks.py` (registration, the
owner's and the moderator's actions)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import text

from app.kernel import db
from app.kernel.actors import ACTING_STATES
from app.kernel.sql import statement
from app.maintainers.embargoed import KIND, TOLD

LEASE_SECONDS = 60  # a claimed delivery's request ends within delivery.DEADLINE_SECONDS; past the lease it is retaken
# after the 1st, 2nd, ... failure of a streak; then hourly, until DISABLE_AFTER from the streak's first failure
RETRY_DELAYS = (
    timedelta(seconds=5),
    timedelta(seconds=30),
    timedelta(minutes=2),
    timedelta(minutes=10),
    timedelta(minutes=30),
)
RETRY_HOURLY = timedelta(hours=1)
DISABLE_AFTER = timedelta(hours=24)
FANOUT_BATCH = 10_000  # change-feed entries per fan-out statement


def retry_delay(failures: int) -> timedelta:
    """How long after its `failures`-th failure in a row a webhook's head is tried again (before the 24 h cap)."""
    return RETRY_DELAYS[failures - 1] if 0 < failures <= len(RETRY_DELAYS) else RETRY_HOURLY


# --- the cursor and the heads, shared with registration and enable ----------------------------------------------

ENSURE_FANOUT = text(
    """
INSERT INTO webhook_fanout (id, seq)
SELECT 1, coalesce((SELECT min(enqueued_seq) FROM webhooks), (SELECT max(seq) FROM changes), 0)
ON CONFLICT (id) DO NOTHING
"""
)
FANOUT_SHARED = text("SELECT seq FROM webhook_fanout WHERE id = 1 FOR SHARE")
_FANOUT_LOCKED = text("SELECT seq FROM webhook_fanout WHERE id = 1 FOR UPDATE")
FEED_HEAD = text("SELECT coalesce(max(seq), 0) FROM changes")
# the fan-out's head, and whether any webhook exists to fan out to (read under the cursor's lock, which a
# registration takes too: a webhook committed before it is seen)
_FEED_HEAD_LISTENED = text(
    "SELECT coalesce(max(seq), 0) AS head, EXISTS (SELECT 1 FROM webhooks) AS listened FROM changes"
)


# A webhook's undelivered rows go one at a time, in seq order, its private entries (`finding.embargoed`, seq NULL)
# after the feed's in the order they were made; the head is the first, unless one of them already has a time (a
# private entry made while a later feed entry waited is not overtaken twice).
PROMOTE_HEADS = text(
    """
UPDATE webhook_deliveries d SET next_attempt_at = now()
FROM webhooks w
CROSS JOIN LATERAL (
  SELECT x.id FROM webhook_deliveries x
  WHERE x.webhook_id = w.id AND x.delivered_at IS NULL
  ORDER BY x.seq, x.id LIMIT 1
) h
WHERE w.id = ANY(CAST(:ids AS bigint[])) AND w.disabled_at IS NULL AND d.id = h.id
  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries y
                  WHERE y.webhook_id = w.id AND y.delivered_at IS NULL AND y.next_attempt_at IS NOT NULL)
"""
)


# --- fan-out ------------------------------------------------------------------------------------------------------

# The repository an entry is about: its own column (published, listed, withdrawn repository; a statement entry that
# names it), else its canonical's (status, statement), else its occurrence's (a withdrawn finding). Each LEFT JOIN
# is an index probe on a public_id, made only when the columns before it are empty.
_FAN_OUT = text(
    """
WITH entries AS (
  SELECT ch.seq, ch.kind, COALESCE(ch.repository_id, c.repository_id, s.repository_id) AS repository_id
  FROM changes ch
  LEFT JOIN canonical_findings c ON ch.repository_id IS NULL AND c.public_id = ch.canonical
  LEFT JOIN scan_findings f ON ch.repository_id IS NULL AND ch.canonical IS NULL AND f.public_id = ch.finding
  LEFT JOIN scans s ON s.id = f.scan_id
  WHERE ch.seq > :after AND ch.seq <= :upto
)
INSERT INTO webhook_deliveries (webhook_id, seq, kind)
SELECT w.id, e.seq, e.kind
FROM entries e
JOIN webhooks w ON w.repository_id = e.repository_id AND e.seq > w.enqueued_seq
JOIN repository_maintainers m
  ON m.repository_id = w.repository_id AND m.account_id = w.owner_id AND m.ended_at IS NULL
JOIN accounts a ON a.id = w.owner_id AND a.state = ANY(CAST(:acting AS text[]))
ORDER BY w.id, e.seq
ON CONFLICT (webhook_id, seq) DO NOTHING
RETURNING webhook_id
"""
)
_LOCK_WEBHOOKS = text("SELECT id FROM webhooks WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id FOR NO KEY UPDATE")
_MOVE_FANOUT = text("UPDATE webhook_fanout SET seq = :seq WHERE id = 1")


# Coordinated disclosure's private entries (app/maintainers/embargoed.py): every running clock the repository's
# maintainers may be told of (TOLD) and every webhook of a current maintainer in good standing lacking its delivery
# (a webhook registered, or a claim verified, while the clock runs included). A sweep, so the report path writes
# nothing new: the open-deadline index finds the running clocks, most runs none.
_ENQUEUE_EMBARGOED = statement(
    """
WITH running AS (
  SELECT d.canonical_finding_id AS cid, d.repository_id FROM disclosures d
  JOIN repositories r ON r.id = d.repository_id AND r.listing_status = 'listed'
  WHERE d.state = 'embargoed' AND EXISTS (
    SELECT 1 FROM scan_findings f JOIN scans s ON s.id = f.scan_id
    WHERE f.canonical_finding_id = d.canonical_finding_id AND {told})
)
INSERT INTO webhook_deliveries (webhook_id, seq, kind, canonical_finding_id)
SELECT w.id, NULL, :kind, running.cid
FROM running
JOIN webhooks w ON w.repository_id = running.repository_id
JOIN repository_maintainers m
  ON m.repository_id = w.repository_id AND m.account_id = w.owner_id AND m.ended_at IS NULL
JOIN accounts a ON a.id = w.owner_id AND a.state = ANY(CAST(:acting AS text[]))
WHERE NOT EXISTS (SELECT 1 FROM webhook_deliveries x WHERE x.webhook_id = w.id AND x.canonical_finding_id = running.cid)
ORDER BY w.id, running.cid
ON CONFLICT (webhook_id, canonical_finding_id) WHERE canonical_finding_id IS NOT NULL DO NOTHING
RETURNING webhook_id
""",
    told=TOLD,
)


async def enqueue_embargoed() -> int:
    """Make the missing `finding.embargoed` deliveries (see `_ENQUEUE_EMBARGOED`) and their webhooks' heads due:
    how many were made."""
    async with db.transaction() as session:
        inserted = (await session.execute(_ENQUEUE_EMBARGOED, {"kind": KIND, "acting": list(ACTING_STATES)})).all()
        touched = sorted({int(row.webhook_id) for row in inserted})
        if touched:
            await session.execute(_LOCK_WEBHOOKS, {"ids": touched})
            await session.execute(PROMOTE_HEADS, {"ids": touched})
        return len(inserted)


async def fan_out(*, batch: int = FANOUT_BATCH) -> int:
    """Turn every change-feed entry past the fan-out's cursor into delivery rows, `batch` entries per transaction.
    Returns how many rows were made. Entries while a webhook is disabled are queued too (enabling it delivers
    them); entries while its owner does not maintain the repository in good standing are not."""
    made = 0
    while True:
        async with db.transaction() as session:
            await session.execute(ENSURE_FANOUT)
            after = int((await session.execute(_FANOUT_LOCKED)).scalar_one())
            feed = (await session.execute(_FEED_HEAD_LISTENED)).one()  # read under the lock: fresh
            head = int(feed.head)
            if head <= after:
                return made
            if not feed.listened:  # no webhook (a run is rung after every report): nothing to read, the cursor moves
                await session.execute(_MOVE_FANOUT, {"seq": head})
                return made
            upto = min(head, after + batch)
            inserted = (
                await session.execute(_FAN_OUT, {"after": after, "upto": upto, "acting": list(ACTING_STATES)})
            ).all()
            touched = sorted({int(row.webhook_id) for row in inserted})
            await session.execute(_MOVE_FANOUT, {"seq": upto})
            if touched:
                # a settle of the same webhook holds its row while it moves the head: take them in id order
                await session.execute(_LOCK_WEBHOOKS, {"ids": touched})
                await session.execute(PROMOTE_HEADS, {"ids": touched})
            made += len(inserted)
        if upto == head:
            return made


# --- claim and settle -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claimed:
    """A delivery leased to one attempt: what to send, and what the settle names."""

    id: int
    webhook_id: int
    seq: int | None  # None: a private entry
    kind: str
    delivery: uuid.UUID
    attempt: int
    url: str
    secret: str
    canonical_finding_id: int | None = None  # a private entry's canonical (`finding.embargoed`)


_CLAIM = text(
    """
WITH due AS (
  SELECT id FROM webhook_deliveries
  WHERE delivered_at IS NULL AND next_attempt_at <= now()
  ORDER BY next_attempt_at
  LIMIT 1
  FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
SET next_attempt_at = now() + make_interval(secs => :lease), attempts = d.attempts + 1
FROM due, webhooks w
WHERE d.id = due.id AND w.id = d.webhook_id
RETURNING d.id, d.webhook_id, d.seq, d.kind, d.delivery, d.attempts, w.url, w.secret, d.canonical_finding_id
"""
)


async def claim_due(*, lease_seconds: float = LEASE_SECONDS) -> Claimed | None:
    """Lease the most overdue head for one attempt (None when nothing is due). One statement in autocommit: the
    lanes poll it after every fan-out, webhook or not."""
    async with db.statement_session() as session:
        row = (await session.execute(_CLAIM, {"lease": lease_seconds})).first()
    if row is None:
        return None
    return Claimed(
        id=int(row.id),
        webhook_id=int(row.webhook_id),
        seq=None if row.seq is None else int(row.seq),
        kind=str(row.kind),
        delivery=row.delivery,
        attempt=int(row.attempts),
        url=str(row.url),
        secret=str(row.secret),
        canonical_finding_id=None if row.canonical_finding_id is None else int(row.canonical_finding_id),
    )


_LOCK_WEBHOOK = text("SELECT disabled_at, now() AS now FROM webhooks WHERE id = :webhook_id FOR NO KEY UPDATE")
_MARK_DELIVERED = text(
    """
UPDATE webhook_deliveries
SET delivered_at = now(), next_attempt_at = NULL, last_status = :status, last_error = NULL
WHERE id = :id AND attempts = :attempt AND delivered_at IS NULL
RETURNING seq
"""
)
_WEBHOOK_DELIVERED = text(
    """
UPDATE webhooks SET failing_since = NULL, consecutive_failures = 0,
  last_delivered_seq = CASE WHEN CAST(:seq AS bigint) IS NULL THEN last_delivered_seq
                            ELSE GREATEST(coalesce(last_delivered_seq, 0), :seq) END
WHERE id = :webhook_id
"""
)
_PROMOTE_NEXT = text(
    """
UPDATE webhook_deliveries SET next_attempt_at = now()
WHERE id = (SELECT id FROM webhook_deliveries WHERE webhook_id = :webhook_id AND delivered_at IS NULL
            ORDER BY seq, id LIMIT 1)
  AND next_attempt_at IS NULL
"""
)
# a private entry's first 2xx tells the maintainers (their first view of it may have come first)
_NOTIFIED = text(
    "UPDATE disclosures SET notified_at = now(), updated_at = now()"
    " WHERE canonical_finding_id = :cid AND notified_at IS NULL"
)
# a private entry with nothing left to show (its repository unlisted, its occurrences withdrawn): gone from the log
_DROP = text(
    "DELETE FROM webhook_deliveries WHERE id = :id AND attempts = :attempt AND delivered_at IS NULL RETURNING id"
)
_MARK_FAILED = text(
    """
UPDATE webhook_deliveries SET last_status = :status, last_error = :error
WHERE id = :id AND attempts = :attempt AND delivered_at IS NULL
RETURNING id
"""
)
_WEBHOOK_FAILED = text(
    """
UPDATE webhooks SET consecutive_failures = consecutive_failures + 1, failing_since = coalesce(failing_since, now())
WHERE id = :webhook_id
RETURNING consecutive_failures, failing_since
"""
)
_RETRY_AT = text("UPDATE webhook_deliveries SET next_attempt_at = :at WHERE id = :id")
_DISABLE = text("UPDATE webhooks SET disabled_at = now() WHERE id = :webhook_id")


async def settle_delivered(claimed: Claimed, status: int) -> bool:
    """The receiver took the entry: log it, end the webhook's failure streak, and make its next entry due. False
    when this attempt no longer holds the delivery (its lease was taken over, or the webhook is gone)."""
    async with db.transaction() as session:
        webhook = (await session.execute(_LOCK_WEBHOOK, {"webhook_id": claimed.webhook_id})).first()
        if webhook is None:
            return False
        marked = await session.execute(
            _MARK_DELIVERED, {"id": claimed.id, "attempt": claimed.attempt, "status": status}
        )
        if marked.first() is None:
            return False
        await session.execute(_WEBHOOK_DELIVERED, {"webhook_id": claimed.webhook_id, "seq": claimed.seq})
        if claimed.canonical_finding_id is not None:
            await session.execute(_NOTIFIED, {"cid": claimed.canonical_finding_id})
        if webhook.disabled_at is None:
            await session.execute(_PROMOTE_NEXT, {"webhook_id": claimed.webhook_id})
        return True


async def settle_dropped(claimed: Claimed) -> bool:
    """A private entry that can no longer be rendered is dropped (nothing was sent) and the next one made due.
    False when this attempt no longer holds the delivery."""
    async with db.transaction() as session:
        webhook = (await session.execute(_LOCK_WEBHOOK, {"webhook_id": claimed.webhook_id})).first()
        if webhook is None:
            return False
        if (await session.execute(_DROP, {"id": claimed.id, "attempt": claimed.attempt})).first() is None:
            return False
        if webhook.disabled_at is None:
            await session.execute(_PROMOTE_NEXT, {"webhook_id": claimed.webhook_id})
        return True


@dataclass(frozen=True)
class Failed:
    """How a failed attempt was settled: tried again at `retry_at`, or the webhook `disabled`."""

    settled: bool
    disabled: bool = False
    retry_at: datetime | None = None


async def settle_failed(claimed: Claimed, status: int | None, error: str) -> Failed:
    """The attempt failed (a non-2xx `status`, or none: `error` says what): the next try per the schedule, or,
    DISABLE_AFTER after the streak's first failure, the webhook disabled (its head waits for the owner)."""
    async with db.transaction() as session:
        webhook = (await session.execute(_LOCK_WEBHOOK, {"webhook_id": claimed.webhook_id})).first()
        if webhook is None:
            return Failed(False)
        marked = await session.execute(
            _MARK_FAILED, {"id": claimed.id, "attempt": claimed.attempt, "status": status, "error": error[:200]}
        )
        if marked.first() is None:
            return Failed(False)
        streak = (await session.execute(_WEBHOOK_FAILED, {"webhook_id": claimed.webhook_id})).one()
        now: datetime = webhook.now
        give_up_at: datetime = streak.failing_since + DISABLE_AFTER
        if now >= give_up_at:
            await session.execute(_DISABLE, {"webhook_id": claimed.webhook_id})
            await session.execute(_RETRY_AT, {"id": claimed.id, "at": None})
            return Failed(True, disabled=True)
        retry_at = min(now + retry_delay(int(streak.consecutive_failures)), give_up_at)
        await session.execute(_RETRY_AT, {"id": claimed.id, "at": retry_at})
        return Failed(True, retry_at=retry_at)


# --- what is waiting ----------------------------------------------------------------------------------------------

_BACKLOG = text(
    """
SELECT
  (SELECT count(*) FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
   WHERE d.delivered_at IS NULL AND w.disabled_at IS NULL) AS pending,
  (SELECT EXTRACT(EPOCH FROM now() - min(next_attempt_at)) FROM webhook_deliveries
   WHERE delivered_at IS NULL AND next_attempt_at <= now()) AS oldest_due,
  (SELECT EXTRACT(EPOCH FROM min(next_attempt_at) - now()) FROM webhook_deliveries
   WHERE delivered_at IS NULL AND next_attempt_at IS NOT NULL) AS next_due_in
"""
)


@dataclass(frozen=True)
class Backlog:
    pending: int  # undelivered entries of enabled webhooks (due, leased, waiting for a retry or their turn)
    oldest_due_seconds: float  # how long the most overdue head has been due (0: none)
    next_due_in: float | None  # seconds until the next head is due (<= 0: now; None: nothing is scheduled)


async def backlog() -> Backlog:
    async with db.read_session(replica=False) as session:
        row = (await session.execute(_BACKLOG)).one()
    return Backlog(
        pending=int(row.pending),
        oldest_due_seconds=float(row.oldest_due or 0),
        next_due_in=None if row.next_due_in is None else float(row.next_due_in),
    )
