"""The webhook API's bodies and answers as typed structures (docs/domain.md "Webhooks")."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from msgspec import Meta, Struct

from app.kernel.answers import Answer, Timestamp, Uuid, enum, iso
from app.kernel.paging import Page
from app.maintainers.destinations import MAX_URL_LENGTH
from app.maintainers.embargoed import KIND as EMBARGOED_KIND
from app.maintainers.webhooks import DeliveryView, Registered, WebhookView
from app.record.models import KINDS


class WebhookRegistration(Struct, kw_only=True):
    """Where to POST the repository's change-feed entries: an https URL on port 443 or 8443 whose host is, or
    resolves to, a public address."""

    EXAMPLES: ClassVar[list[dict[str, Any]]] = [{"url": "https://hooks.example.com/tarakan"}]

    url: Annotated[str, Meta(min_length=1, max_length=MAX_URL_LENGTH)]


_DISABLED = Meta(description="set when it failed for 24 hours; POST .../enable starts it again")


class Webhook(Answer):
    id: int
    repository: Annotated[str, Meta(description="host/owner/name")]
    url: str
    disabled_at: Annotated[Timestamp | None, _DISABLED]
    failing_since: Annotated[Timestamp | None, Meta(description="the first failure of the current streak")]
    consecutive_failures: int
    last_delivered_seq: Annotated[int | None, Meta(description="the change-feed seq of the last entry delivered")]
    inserted_at: Timestamp


class NewWebhook(Answer):
    """The webhook just registered, with its secret: the HMAC-SHA256 key of `X-Tarakan-Signature-256` and
    `X-Tarakan-Signature-V2`, shown only here."""

    id: int
    repository: Annotated[str, Meta(description="host/owner/name")]
    url: str
    secret: Annotated[str, Meta(description="shown once: keep it to verify the signatures")]
    disabled_at: Annotated[Timestamp | None, _DISABLED]
    inserted_at: Timestamp


class NewWebhookAnswer(Answer):
    webhook: NewWebhook


class WebhookAnswer(Answer):
    webhook: Webhook


class WebhookList(Answer):
    webhooks: list[Webhook]


class Delivery(Answer):
    """One change-feed entry for one webhook: sent until a 2xx, in seq order, with the same delivery id every
    time; or a private `finding.embargoed` entry (no seq: never in the change feed), sent after the feed's."""

    delivery: Annotated[Uuid, Meta(description="X-Tarakan-Delivery")]
    seq: Annotated[int | None, Meta(description="the change-feed entry's seq (null: a private entry)")]
    kind: Annotated[str, enum((*KINDS, EMBARGOED_KIND))]
    attempts: int
    last_status: Annotated[int | None, Meta(description="the receiver's last HTTP status (null: no answer)")]
    last_error: Annotated[str | None, Meta(description="why the last attempt failed, when it did")]
    next_attempt_at: Annotated[
        Timestamp | None, Meta(description="null when delivered, waiting for the entry before it, or disabled")
    ]
    delivered_at: Timestamp | None


class DeliveryPage(Answer):
    entries: list[Delivery]
    next_cursor: str | None


def webhook(view: WebhookView) -> Webhook:
    return Webhook(
        id=view.id,
        repository=view.repository,
        url=view.url,
        disabled_at=iso(view.disabled_at),
        failing_since=iso(view.failing_since),
        consecutive_failures=view.consecutive_failures,
        last_delivered_seq=view.last_delivered_seq,
        inserted_at=iso(view.inserted_at) or "",
    )


def new_webhook_answer(registered: Registered) -> NewWebhookAnswer:
    view = registered.webhook
    return NewWebhookAnswer(
        webhook=NewWebhook(
            id=view.id,
            repository=view.repository,
            url=view.url,
            secret=registered.secret,
            disabled_at=iso(view.disabled_at),
            inserted_at=iso(view.inserted_at) or "",
        )
    )


def delivery_page(page: Page[DeliveryView]) -> DeliveryPage:
    return DeliveryPage(
        entries=[
            Delivery(
                delivery=str(d.delivery),
                seq=d.seq,
                kind=d.kind,
                attempts=d.attempts,
                last_status=d.last_status,
                last_error=d.last_error,
                next_attempt_at=iso(d.next_attempt_at),
                delivered_at=iso(d.delivered_at),
            )
            for d in page["entries"]
        ],
        next_cursor=page["next_cursor"],
    )
