"""Maintainers' webhooks: registration, the owner's actions (show, list, enable, delete, the delivery log) and the
moderator's (the list, the delete), the only writer of `webhooks` rows besides the delivery state `webhook_queue.py`
keeps (docs/domain.md §14 "Webhooks")."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import ColumnElement, delete, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.kernel import db
from app.kernel.errors import Conflict, Forbidden, NotFound, ValidationError
from app.kernel.paging import Page, decode_id_cursor, encode_id_cursor, keyset_page
from app.maintainers import destinations, webhook_queue
from app.maintainers.access import acting_account, listed_repository, slug
from app.maintainers.models import RepositoryMaintainer, Webhook, WebhookDelivery
from app.record.outbox import ring_webhooks_after_commit
from app.registry.models import Repository

MAX_PER_REPOSITORY = 5
DELETE_ACTION = "webhook.delete"  # the moderator's delete, in the audit log
MODERATED_LIST = 100  # the most webhooks of one repository the maintain page lists to moderators
MAX_LOG_PAGE = 100
DEFAULT_LOG_PAGE = 50
_NO_WEBHOOK = {"webhook": ["not found"]}


def new_secret() -> str:
    """A webhook's HMAC-SHA256 key: 32 random bytes, hex (shown once)."""
    return "whsec_" + secrets.token_hex(32)


@dataclass(frozen=True)
class WebhookView:
    """A webhook as its owner sees it (never the secret, except once in `Registered`)."""

    id: int
    repository: str  # host/owner/name
    url: str
    disabled_at: datetime | None
    failing_since: datetime | None
    consecutive_failures: int
    last_delivered_seq: int | None
    inserted_at: datetime


@dataclass(frozen=True)
class Registered:
    webhook: WebhookView
    secret: str


@dataclass(frozen=True)
class DeliveryView:
    """One line of a webhook's delivery log."""

    delivery: uuid.UUID
    seq: int | None  # None: a private entry (`finding.embargoed`)
    kind: str
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None


def _view(webhook: Webhook, repository: str) -> WebhookView:
    return WebhookView(
        id=webhook.id,
        repository=repository,
        url=webhook.url,
        disabled_at=webhook.disabled_at,
        failing_since=webhook.failing_since,
        consecutive_failures=webhook.consecutive_failures,
        last_delivered_seq=webhook.last_delivered_seq,
        inserted_at=webhook.inserted_at,
    )


# --- who may --------------------------------------------------------------------------------------------------


def _maintains(repository_id: Any, account_id: Any) -> ColumnElement[bool]:
    return exists().where(
        RepositoryMaintainer.repository_id == repository_id,
        RepositoryMaintainer.account_id == account_id,
        RepositoryMaintainer.ended_at.is_(None),
    )


async def _require_maintainer(session: AsyncSession, repository: Repository, account_id: int) -> None:
    if not (await session.execute(select(_maintains(repository.id, account_id)))).scalar():
        raise Forbidden({"repository": ["only a verified maintainer of this repository can manage its webhooks"]})


async def _count(session: AsyncSession, repository_id: int) -> int:
    """The repository's webhooks that count toward MAX_PER_REPOSITORY: those whose owner maintains it now. An ended
    maintainer's stay (their owner reads the log and deletes them; a moderator may delete them) but take no place
    from the current maintainers; were that maintainer verified again, theirs would count again."""
    counted = select(func.count()).where(
        Webhook.repository_id == repository_id, _maintains(Webhook.repository_id, Webhook.owner_id)
    )
    return int((await session.execute(counted)).scalar_one())


def _too_many() -> Conflict:
    return Conflict(
        {"repository": [f"already has {MAX_PER_REPOSITORY} webhooks, the most a repository may have; delete one first"]}
    )


# --- registration, the owner's actions ----------------------------------------------------------------------------


async def register_webhook(account_id: int, host: str, owner: str, name: str, url: str) -> Registered:
    """A new webhook of a listed repository for an account that maintains it in good standing: 404 for an unknown
    repository, 403 for anyone else, 422 naming `url` for a refused destination (resolved with no transaction
    open), 409 past MAX_PER_REPOSITORY. It gets the entries committed after it (its `enqueued_seq` is the feed's
    head, read while no fan-out runs)."""
    async with db.read_session(replica=False) as session:
        await acting_account(session, account_id)
        repository = await listed_repository(session, host, owner, name)
        await _require_maintainer(session, repository, account_id)
        if await _count(session, repository.id) >= MAX_PER_REPOSITORY:
            raise _too_many()
    try:
        destination = await destinations.check_registration(url)
    except destinations.Refused as exc:
        raise ValidationError({"url": [str(exc)]}) from None
    async with db.transaction() as session:
        await acting_account(session, account_id)
        repository = await listed_repository(session, host, owner, name, lock=True)
        await _require_maintainer(session, repository, account_id)
        if await _count(session, repository.id) >= MAX_PER_REPOSITORY:
            raise _too_many()
        # a fan-out running now holds the cursor's row: wait for it, so it cannot pass entries this webhook should
        # get without seeing the webhook
        await session.execute(webhook_queue.ENSURE_FANOUT)
        await session.execute(webhook_queue.FANOUT_SHARED)
        head = int((await session.execute(webhook_queue.FEED_HEAD)).scalar_one())
        secret = new_secret()
        webhook = Webhook(
            repository_id=repository.id, owner_id=account_id, url=destination.url, secret=secret, enqueued_seq=head
        )
        session.add(webhook)
        await session.flush()
        await session.refresh(webhook)
        ring_webhooks_after_commit()  # an embargo running now is told to it at once (webhook_queue's sweep)
        return Registered(_view(webhook, slug(repository)), secret)


async def _owned(session: AsyncSession, account_id: int, webhook_id: int, *, lock: bool = False) -> tuple[Webhook, str]:
    """The account's webhook and its repository's slug; 404 for anyone else's (no more visible than a missing one)."""
    query = (
        select(Webhook, Repository)
        .join(Repository, Repository.id == Webhook.repository_id)
        .where(Webhook.id == webhook_id, Webhook.owner_id == account_id)
    )
    if lock:
        query = query.with_for_update(of=Webhook, key_share=True)
    row = (await session.execute(query)).one_or_none()
    if row is None:
        raise NotFound(_NO_WEBHOOK)
    return row[0], slug(row[1])


async def get_webhook(account_id: int, webhook_id: int) -> WebhookView:
    async with db.read_session(replica=False) as session:
        webhook, slug = await _owned(session, account_id, webhook_id)
        return _view(webhook, slug)


async def list_webhooks(account_id: int, host: str, owner: str, name: str) -> list[WebhookView]:
    """The account's webhooks of a listed repository (at most MAX_PER_REPOSITORY: no paging), oldest first."""
    async with db.read_session(replica=False) as session:
        repository = await listed_repository(session, host, owner, name)
        found = (
            (
                await session.execute(
                    select(Webhook)
                    .where(Webhook.repository_id == repository.id, Webhook.owner_id == account_id)
                    .order_by(Webhook.id)
                )
            )
            .scalars()
            .all()
        )
        return [_view(w, slug(repository)) for w in found]


async def delete_webhook(account_id: int, webhook_id: int) -> None:
    """Delete the account's webhook and its delivery log (404 for anyone else's). Allowed after the maintainership
    ended too: nobody is left with a webhook they cannot remove."""
    async with db.transaction() as session:
        deleted = await session.execute(
            delete(Webhook).where(Webhook.id == webhook_id, Webhook.owner_id == account_id).returning(Webhook.id)
        )
        if deleted.first() is None:
            raise NotFound(_NO_WEBHOOK)


# --- the moderator's view and delete ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModeratedWebhook:
    """A webhook as a moderator sees it: whose, where to (host and port only: a URL's path or query may hold the
    receiver's own token), and whether its owner still maintains the repository. Never the secret."""

    id: int
    repository: str  # host/owner/name
    owner: str  # the owner's handle
    destination: str  # the URL's host[:port]
    maintained: bool
    disabled_at: datetime | None
    inserted_at: datetime


def _moderated_query() -> Any:
    return (
        select(
            Webhook,
            Repository,
            Account.handle,
            _maintains(Webhook.repository_id, Webhook.owner_id).label("maintained"),
        )
        .join(Repository, Repository.id == Webhook.repository_id)
        .join(Account, Account.id == Webhook.owner_id)
        .order_by(Webhook.id)
    )


def _moderated(row: Any) -> ModeratedWebhook:
    webhook, repository, handle, maintained = row
    return ModeratedWebhook(
        id=webhook.id,
        repository=slug(repository),
        owner=str(handle),
        destination=urlsplit(webhook.url).netloc,  # stored URLs hold no user name or password
        maintained=bool(maintained),
        disabled_at=webhook.disabled_at,
        inserted_at=webhook.inserted_at,
    )


async def repository_webhooks(repository_id: int) -> list[ModeratedWebhook]:
    """The webhooks of a repository, whoever owns them, oldest first, the first MODERATED_LIST (no paging: five count
    at a time, ended maintainers' add a few): the maintain page's list for moderators."""
    async with db.read_session(replica=False) as session:
        found = await session.execute(
            _moderated_query().where(Webhook.repository_id == repository_id).limit(MODERATED_LIST)
        )
        return [_moderated(row) for row in found.all()]


async def moderation_subject(webhook_id: int) -> ModeratedWebhook | None:
    """One webhook for the moderator's form (None when there is none)."""
    async with db.read_session(replica=False) as session:
        row = (await session.execute(_moderated_query().where(Webhook.id == webhook_id))).first()
        return None if row is None else _moderated(row)


async def remove_webhook(session: AsyncSession, webhook_id: int) -> ModeratedWebhook:
    """Delete a webhook and its delivery log in the moderator's (audited) transaction, whoever owns it; 404 naming
    `webhook` when there is none. Returns what it was, for the audit event."""
    row = (
        await session.execute(_moderated_query().where(Webhook.id == webhook_id).with_for_update(of=Webhook))
    ).first()
    if row is None:
        raise NotFound({"webhook": [f"no webhook with id {webhook_id}"]})
    await session.execute(delete(Webhook).where(Webhook.id == webhook_id))
    return _moderated(row)


async def enable_webhook(account_id: int, webhook_id: int) -> WebhookView:
    """Enable the account's disabled webhook again (a current maintainer in good standing; 403 otherwise): its
    failure streak starts over and its oldest undelivered entry is tried at once, then the rest in order (entries
    that came while it was disabled were queued). An enabled webhook answers as it is."""
    async with db.transaction() as session:
        await acting_account(session, account_id)
        webhook, slug = await _owned(session, account_id, webhook_id, lock=True)
        if not (await session.execute(select(_maintains(webhook.repository_id, account_id)))).scalar():
            raise Forbidden({"repository": ["only a current maintainer of this repository can enable its webhooks"]})
        if webhook.disabled_at is not None:
            webhook.disabled_at = None
            webhook.failing_since = None
            webhook.consecutive_failures = 0
            await session.flush()
            await session.execute(webhook_queue.PROMOTE_HEADS, {"ids": [webhook.id]})
        return _view(webhook, slug)


async def deliveries_page(account_id: int, webhook_id: int, *, cursor: str | None, limit: int) -> Page[DeliveryView]:
    """The account's webhook's delivery log, newest first (keyset on the row's id: the feed's entries are made in
    seq order, private entries between them); 404 for anyone else's webhook."""
    after = decode_id_cursor(cursor) if cursor is not None else None  # InvalidCursor (400) before any read
    query = (
        select(
            WebhookDelivery.id,
            WebhookDelivery.delivery,
            WebhookDelivery.seq,
            WebhookDelivery.kind,
            WebhookDelivery.attempts,
            WebhookDelivery.last_status,
            WebhookDelivery.last_error,
            WebhookDelivery.next_attempt_at,
            WebhookDelivery.delivered_at,
        )
        .where(WebhookDelivery.webhook_id == webhook_id)
        .order_by(WebhookDelivery.id.desc())
        .limit(limit + 1)
    )
    if after is not None:
        query = query.where(WebhookDelivery.id < after)
    async with db.read_session(replica=False) as session:
        await _owned(session, account_id, webhook_id)
        found = [(int(row[0]), DeliveryView(*row[1:])) for row in (await session.execute(query)).all()]
    page = keyset_page(found, limit, lambda d: encode_id_cursor(d[0]))
    return {"entries": [view for _, view in page["entries"]], "next_cursor": page["next_cursor"]}
