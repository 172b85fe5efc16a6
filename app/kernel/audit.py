"""The audit log (authoritative): one row per moderation or administration action, in the action's transaction,
numbered at its commit in commit order (the takedown fence: docs/scaling.md "Read replicas"); and the shared cache's
purge of what the action changed, after its commit (docs/scaling.md "Shared cache")."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Text, literal, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from app.kernel.columns import Inserted
from app.kernel.config import varnish_purge_urls
from app.kernel.db import Base
from app.kernel.purge import purge_after_commit
from app.kernel.shared_cache import ATLAS_TAG, SITEMAP_TAG, occurrence_tag, pattern_tag, repository_tag
from app.kernel.sql import Name, compose

# pg_advisory_xact_lock key ("tarkfeed"): serializes the commit-order numbering of the takedown fence here and of
# the change feed (app.record.changes); one lock, so two commits never take the two in opposite orders
COMMIT_ORDER_LOCK = 0x7461726B66656564
FENCE_SEQUENCE = "audit_fence_seq"


class AuditEvent(Inserted, Base):
    """Moderation and administration audit log (authoritative). One row per action, same transaction."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index("audit_events_inserted_idx", text("inserted_at DESC"), text("id DESC")),
        Index("audit_events_subject_idx", "subject_type", "subject_id"),
        Index("audit_events_actor_id_idx", "actor_id"),
        Index("audit_events_fence_idx", "fence", unique=True),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # allocation order
    # commit order: NULL until the action's transaction commits (`FENCE_FUNCTION`); its newest value is the takedown
    # fence (app.kernel.db.TAKEDOWN_FENCE)
    fence: Mapped[int | None] = mapped_column(BigInteger)
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("accounts.id", ondelete="SET NULL"))
    action: Mapped[str] = mapped_column(Text)
    subject_type: Mapped[str] = mapped_column(Text)
    subject_id: Mapped[str] = mapped_column(Text)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    reason: Mapped[str | None] = mapped_column(Text)
    notes: Mapped[str | None] = mapped_column(Text)


# The commit-order numbering (installed by migration 0012), as the change feed's (docs/domain.md §12 decision 8) but
# its own sequence: the fence moves on audited actions only, not on every report. It takes the feed's lock: one lock
# for both numberings, so a takedown that writes feed entries too takes one lock, in no order that could deadlock.
FENCE_FUNCTION = compose(
    """
CREATE OR REPLACE FUNCTION audit_events_fence_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock({lock});
  UPDATE audit_events SET fence = nextval('{sequence}') WHERE id = NEW.id;
  RETURN NULL;
END $$
""",
    lock=literal(COMMIT_ORDER_LOCK),
    sequence=Name(FENCE_SEQUENCE),
).sql


def at_commit_trigger(function: str, table: str, column: str) -> str:
    """The deferred trigger that runs a commit-order numbering, `function`, at the commit of a transaction that
    inserted `table` rows whose `column` is not numbered yet (the fence's here; the change feed's in app.record)."""
    return compose(
        """
CREATE CONSTRAINT TRIGGER {function} AFTER INSERT ON {table}
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.{column} IS NULL)
EXECUTE FUNCTION {function}()
""",
        function=Name(function),
        table=Name(table),
        column=Name(column),
    ).sql


FENCE_TRIGGER = at_commit_trigger("audit_events_fence_at_commit", "audit_events", "fence")


async def record_audit(
    session: AsyncSession,
    *,
    actor_id: int | None,
    action: str,
    subject_type: str,
    subject_id: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    reason: str | None,
    notes: str | None,
) -> AuditEvent:
    """Add one audit event to the caller's transaction and flush it (its id is known on return)."""
    event = AuditEvent(
        actor_id=actor_id,
        action=action,
        subject_type=subject_type,
        subject_id=subject_id,
        before=before,
        after=after,
        reason=reason,
        notes=notes,
    )
    session.add(event)
    await session.flush()
    # every takedown is audited here: the pages naming what it touched leave the shared cache after the commit
    if varnish_purge_urls():
        purge_after_commit(await _touched_tags(session, action, subject_type, subject_id))
    return event


# What each audited action can change on public pages, read in the action's transaction (after its change, before
# the commit). Repository-wide actions name the repository's tag, not its occurrences': every page that shows an
# occurrence carries its repository's tag too (app/site/records.py), and a repository may hold 10^5 of them.
_SCAN_TAGS = text(
    """SELECT s.repository_id, f.id AS occurrence_id, c.pattern_key,
              EXISTS (SELECT 1 FROM infestation_patterns p WHERE p.pattern_key = c.pattern_key) AS on_atlas
       FROM scans s
       LEFT JOIN scan_findings f ON f.scan_id = s.id
       LEFT JOIN canonical_findings c ON c.id = f.canonical_finding_id
       WHERE s.id = :id"""
)
_STATEMENT_TAGS = text(
    """SELECT c.repository_id, f.id AS occurrence_id, c.pattern_key,
              EXISTS (SELECT 1 FROM infestation_patterns p WHERE p.pattern_key = c.pattern_key) AS on_atlas
       FROM finding_statements st
       JOIN canonical_findings c ON c.id = st.canonical_finding_id
       LEFT JOIN scan_findings f ON f.canonical_finding_id = c.id
       WHERE st.id = :id"""
)
_REPOSITORY_TAGS = text(
    """SELECT r.id AS repository_id, NULL AS occurrence_id, c.pattern_key,
              EXISTS (SELECT 1 FROM infestation_patterns p WHERE p.pattern_key = c.pattern_key) AS on_atlas
       FROM repositories r
       LEFT JOIN (SELECT DISTINCT repository_id, pattern_key FROM canonical_findings
                  WHERE pattern_key IS NOT NULL AND pattern_key <> '') c ON c.repository_id = r.id
       WHERE r.host = :host AND r.owner = :owner AND r.name = :name"""
)
# a person's change to a coordinated-disclosure clock (subject: the canonical's id): its repository's pages (the
# stub, the ledger's rows), its occurrences' pages and twins (public once it is published) and the pattern it feeds
_DISCLOSURE_TAGS = text(
    """SELECT c.repository_id, f.id AS occurrence_id, c.pattern_key,
              EXISTS (SELECT 1 FROM infestation_patterns p WHERE p.pattern_key = c.pattern_key) AS on_atlas
       FROM canonical_findings c
       LEFT JOIN scan_findings f ON f.canonical_finding_id = c.id
       WHERE c.id = :id"""
)
# an account's changed role or state recounts the checks it recorded: those repositories' statuses may move
_ACCOUNT_TAGS = text(
    """SELECT DISTINCT c.repository_id, NULL AS occurrence_id, NULL AS pattern_key, false AS on_atlas
       FROM accounts a
       JOIN canonical_finding_checks k ON k.account_id = a.id
       JOIN canonical_findings c ON c.id = k.canonical_finding_id
       WHERE a.handle = :handle"""
)


async def _touched_tags(session: AsyncSession, action: str, subject_type: str, subject_id: str) -> set[str] | None:
    """The shared-cache tags of the pages `action` may have changed; None: they cannot be named, purge everything."""
    if action == "repository.delete":  # its rows are gone: its own tag, the atlas it may have fed, the sitemaps
        return {repository_tag(int(subject_id)), ATLAS_TAG, SITEMAP_TAG}
    if subject_type == "flag":
        return {ATLAS_TAG}  # a read-path flag: the atlas pages
    if subject_type == "scan" and subject_id.isdigit():
        rows = await session.execute(_SCAN_TAGS, {"id": int(subject_id)})
    elif subject_type == "statement" and subject_id.isdigit():
        rows = await session.execute(_STATEMENT_TAGS, {"id": int(subject_id)})
    elif subject_type == "disclosure" and subject_id.isdigit():
        rows = await session.execute(_DISCLOSURE_TAGS, {"id": int(subject_id)})
    elif subject_type == "repository" and subject_id.count("/") == 2:
        host, owner, name = subject_id.split("/")
        rows = await session.execute(_REPOSITORY_TAGS, {"host": host, "owner": owner, "name": name})
        if action != "repository.listing":  # a maintainer's end shows on the repository's own pages only
            return {repository_tag(row.repository_id) for row in rows}
    elif subject_type == "account":
        rows = await session.execute(_ACCOUNT_TAGS, {"handle": subject_id})
    else:
        return None
    tags: set[str] = set()
    for row in rows:
        if row.repository_id is not None:
            tags.update((repository_tag(row.repository_id), SITEMAP_TAG))
        if row.occurrence_id is not None:
            tags.add(occurrence_tag(row.occurrence_id))
        if row.pattern_key:
            tags.add(pattern_tag(row.pattern_key))
        if row.on_atlas:
            tags.add(ATLAS_TAG)
    return tags
