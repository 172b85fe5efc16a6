"""Coordinated disclosure's part of the OpenAPI document (docs/domain.md "Coordinated disclosure"): the public ledger
`/disclosures.json`. The `disclosure` object on a finding's twin, the repository twin's `disclosures` stub and the
export's records are in their answer types (app.reports.embargo, app.disclosure.ledger)."""

from __future__ import annotations

from app.disclosure.actions import DisclosureChanged, ExtensionRequest
from app.disclosure.ledger import LEDGER_MAX, LEDGER_PAGE, PUBLISHED_DAYS, DisclosureLedger
from app.kernel.openapi import UUID, Schema, get, json_answer, param, post, ref
from app.maintainers.types import NoBody

_CANONICAL = param("canonical_public_id", schema=UUID)

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
