"""Coordinated disclosure's part of the OpenAPI document (docs/domain.md "Coordinated disclosure"): the public ledger
`/disclosures.json`. The `disclosure` object on a finding's twin, the repository twin's `disclosures` stub and the
export's records are in their answer types (app.reports.embargo, app.disclosure.ledger)."""

from __future__ import annotations

from app.disclosure.actions import DisclosureChanged, ExtensionRequest
from app.disclosure.ledger import LEDGER_MAX, LEDGER_PAGE, PUBLISHED_DAYS, DisclosureLedger
from app.kernel.openapi import UUID, Schema, get, json_answer, param, post, ref, secured_get
from app.maintainers.embargoed import MAX_WINDOW_DAYS, PAGE_DEFAULT, PAGE_MAX
from app.maintainers.types import (
    DisclosureClockAnswer,
    DisclosureWindow,
    DisclosureWindowAnswer,
    EmbargoedPage,
    EmbargoedPayload,
    NoBody,
)

_CANONICAL = param("canonical_public_id", schema=UUID)
_REPO = [param("host"), param("owner"), param("name")]


def _put(operation: Schema) -> Schema:
    """A PUT of the API: as `post()` builds it, under its own method."""
    return {"put": operation["post"]}


DISCLOSURE_PATHS: dict[str, Schema] = {
    # the people who may change a clock (app/disclosure/actions.py)
    "/api/v1/findings/{canonical_public_id}/disclosure/extend": post(
        "extendDisclosure",
        "Extend an embargoed finding's deadline (scope repositories:maintain; a verified maintainer of its "
        "repository, once, by 1-30 days, after stating affected or under_investigation; never past 120 days after "
        "the report): 403 for anyone else, 422 naming `days`, `reason` or `disclosure` (not embargoed, extended "
        "already, state first)",
        ExtensionRequest,
        {"200": json_answer(ref(DisclosureChanged), "Extended: the finding's clock, its extension appended")},
        [_CANONICAL],
    ),
    "/api/v1/findings/{canonical_public_id}/disclosure/publish": post(
        "publishDisclosure",
        "Publish an embargoed finding now (scope repositories:maintain or findings:submit): a verified maintainer "
        "of its repository (`maintainer`), or the reporter of its first report when the repository has no window "
        "of its own (`reporter`); 403 for anyone else, 422 naming `disclosure` when it is not embargoed",
        NoBody,
        {"200": json_answer(ref(DisclosureChanged), "Published: public everywhere at the next request")},
        [_CANONICAL],
        required=False,
    ),
    # the maintainer is told first (app/maintainers/embargoed.py)
    "/api/v1/repos/{host}/{owner}/{name}/disclosure": _put(
        post(
            "setDisclosureWindow",
            f"Set a repository's disclosure window, 0-{MAX_WINDOW_DAYS} days (0: none, the default), for findings "
            "reported from now on (scope repositories:maintain; a verified maintainer of it; audited): 403 for anyone "
            "else, 422 naming `days`",
            DisclosureWindow,
            {"200": json_answer(ref(DisclosureWindowAnswer), "Set: the repository's window")},
            _REPO,
        )
    ),
    "/api/v1/repos/{host}/{owner}/{name}/embargoed": secured_get(
        "listEmbargoedFindings",
        "A repository's embargoed findings in full, each with its `disclosure` clock, by canonical (scope "
        "repositories:maintain; its verified maintainers only, 403 for anyone else); viewing them sets each "
        "clock's `notified_at` where it has none",
        EmbargoedPage,
        [
            *_REPO,
            param("cursor", "query", description="the `next_cursor` of the previous page"),
            param(
                "limit", "query", {"type": "string", "pattern": "^[0-9]+$"}, f"1..{PAGE_MAX}, default {PAGE_DEFAULT}"
            ),
        ],
    ),
    "/api/v1/findings/{canonical_public_id}/disclosure/acknowledge": post(
        "acknowledgeDisclosure",
        "Acknowledge an embargoed finding's clock (scope repositories:maintain; a verified maintainer of its "
        "repository; an occurrence's public id is accepted too): sets `acknowledged_at` once, 403 for anyone else, "
        "404 for a finding without a clock",
        NoBody,
        {"200": json_answer(ref(DisclosureClockAnswer), "Acknowledged: the finding's clock")},
        [_CANONICAL],
        required=False,
    ),
    "/disclosures.json": get(
        "listDisclosures",
        f"The coordinated-disclosure ledger: every open embargo of a listed repository by deadline, then the last "
        f"{PUBLISHED_DAYS} days' publications, newest first, with how each ended; a finding is named only by its "
        "repository, severity and dates (422 naming `repository`, `cursor` or `limit` when malformed)",
        DisclosureLedger,
        [
            param("repository", "query", description="HOST/OWNER/NAME: only this repository's clocks"),
            param("cursor", "query", description="the `next_cursor` of the previous page"),
            param(
                "limit", "query", {"type": "string", "pattern": "^[0-9]+$"}, f"1..{LEDGER_MAX}, default {LEDGER_PAGE}"
            ),
        ],
    ),
}


# What a maintainer's webhook receives of an embargoed finding (the OpenAPI document's `webhooks`): a private entry,
# never in the change feed, signed and retried as the feed's entries are
EMBARGOED_RECEIVER: Schema = {
    "post": {
        "operationId": "receiveEmbargoedFinding",
        "summary": "An embargoed finding of the webhook's repository, in full, once its clock runs (X-Tarakan-Event "
        "finding.embargoed; the same headers and signatures as receiveChange); sent after the change-feed entries "
        "waiting before it, at least once",
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref(EmbargoedPayload)}}},
        "responses": {
            "2XX": {"description": "Delivered: the maintainers were told (the clock's `notified_at`)"},
            "default": {"description": "Not delivered: sent again on the schedule of receiveChange"},
        },
    }
}
DISCLOSURE_WEBHOOKS: dict[str, Schema] = {"findingEmbargoed": EMBARGOED_RECEIVER}
