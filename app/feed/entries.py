"""One change-feed entry as `GET /api/v1/changes` serves it now, for the maintainers' webhooks (their deliveries
carry "the entry as the feed renders it": app/maintainers/delivery.py takes this as its `Render`)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from app.feed import queries
from app.feed.types import ChangeEntry, change_entry
from app.kernel import db
from app.kernel.answers import Answer, Uuid, as_json
from app.kernel.openapi import UUID, Schema, param, ref
from app.record import changes


class WebhookPayload(Answer):
    """The body of a webhook delivery (app/maintainers/delivery.py writes these bytes and signs them): one
    change-feed entry about the webhook's repository."""

    delivery: Annotated[Uuid, Meta(description="the same as X-Tarakan-Delivery; the same on every retry")]
    entry: Annotated[ChangeEntry, Meta(description="the entry as GET /api/v1/changes renders it at the attempt")]


async def rendered_entry(seq: int) -> dict[str, Any] | None:
    """The entry numbered `seq` rendered from current visibility (a takedown since it was written redacts it as it
    redacts the feed), read on the primary; None when there is no such entry."""
    with db.primary_reads():
        page = await queries.changes_page(cursor=changes.cursor_at(seq), limit=1)
    entries = page["entries"]
    if not entries or entries[0]["seq"] != seq:
        return None
    return as_json(change_entry(entries[0]))


# What a maintainer's webhook receives (docs/domain.md §14 "Webhooks"): the OpenAPI document's `webhooks` entry, an
# operation of its receiver's, not ours.
CHANGE_RECEIVER: Schema = {
    "post": {
        "operationId": "receiveChange",
        "summary": "One change-feed entry about the webhook's repository, in seq order, at least once",
        "parameters": [
            param("X-Tarakan-Event", "header", {"type": "string"}, "the entry's kind"),
            param("X-Tarakan-Delivery", "header", UUID, "one id per entry and webhook: deduplicate by it"),
            param(
                "X-Tarakan-Signature-256",
                "header",
                {"type": "string", "pattern": "^sha256=[0-9a-f]{64}$"},
                "sha256= and the hex HMAC-SHA256 of the exact body bytes, keyed with the webhook's secret",
            ),
            param(
                "X-Tarakan-Timestamp",
                "header",
                {"type": "string", "pattern": "^[0-9]+$"},
                "when this attempt was sent, in Unix seconds (new on every retry); refuse one more than 5 minutes away",
            ),
            param(
                "X-Tarakan-Signature-V2",
                "header",
                {"type": "string", "pattern": "^sha256=[0-9a-f]{64}$"},
                "sha256= and the hex HMAC-SHA256 of the timestamp, a dot and the exact body bytes, keyed with the "
                "webhook's secret",
            ),
        ],
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref(WebhookPayload)}}},
        "responses": {
            "2XX": {"description": "Delivered: the next entry follows"},
            "default": {
                "description": "Not delivered (also no answer within 10 s, or a redirect): sent again after "
                "5 s, 30 s, 2 min, 10 min, 30 min, then hourly; disabled 24 hours after the first failure"
            },
        },
    }
}
