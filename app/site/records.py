"""The public record pages composing several features, a repository and a finding, with their JSON twins; visibility
is `app.record.visibility`'s, and unknown, hidden and malformed addresses are the same 404."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, TypedDict

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from app.accounts.sessions import current_account
from app.accounts.viewer import viewer_for
from app.disclosure.ledger import finding_disclosure, html_time, repository_disclosures
from app.infestations.memberships import list_repository_infestations
from app.infestations.rows import RepositoryInfestation, as_answer
from app.kernel import db, sql
from app.kernel.actors import Viewer, can_moderate, in_good_standing
from app.kernel.answers import UNSET, columns, iso
from app.kernel.errors import NotFound
from app.kernel.refs import ref_slug
from app.kernel.shared_cache import occurrence_tag, pattern_tag, repository_tag
from app.kernel.urls import finding_path, repo_path, twin_path
from app.kernel.web import ERROR_CACHE, JSON_SUFFIX, PRIVATE_CACHE, PUBLIC_CACHE, cache_for, json_twin, page, wants_json
from app.maintainers.models import VEX_JUSTIFICATIONS, VEX_STATUSES
from app.maintainers.queries import current_maintainers, is_current_maintainer
from app.maintainers.statement_queries import (
    StatementView,
    current_by_occurrences,
    current_statement_row,
    statement_in,
    statements_of,
)
from app.maintainers.statement_types import maintainer_statement, repository_maintainers
from app.maintainers.statements import MAX_TEXT
from app.record import observations
from app.record.changes import withdrawn_finding
from app.record.observations import Observation
from app.record.takedowns import Marks, page_marks
from app.record.visibility import repository_visible
from app.registry import queries
from app.registry.queries import RegisteredRepository
from app.registry.types import public_repository
from app.reports.embargo import DisclosureAnswer
from app.reports.models import REVIEW_STATUS_WORDS
from app.reports.queries import (
    FINDING,
    finding_of,
    finding_params,
    get_finding,
    list_repository_reports,
    newest_public_occurrence,
)
from app.reports.rows import OCCURRENCE_COLUMNS, FindingRow, ReportFindingRow, RepositoryReport
from app.reports.serializers import finding_detail
from app.site.burden import burden_of
from app.site.types import (
    FindingCheck,
    FindingRecord,
    RecordFinding,
    RecordReport,
    RepositoryRecord,
    Tombstone,
)

REPOSITORY_REPORTS = 20
REPOSITORY_INFESTATIONS = 50
# a finding page's reads in one statement: the finding, its checks and ledger (`FINDING`) and its current statement
_FINDING_PAGE = sql.statement(
    "SELECT finding.*, said.* FROM ({finding}) AS finding LEFT JOIN LATERAL ({said}) AS said ON TRUE",
    finding=FINDING,
    said=current_statement_row(sql.outer("finding.canonical_id")),
)


class StatementForm(TypedDict):
    """The maintainer's statement form as typed (`values`) and what refused it (`errors`)."""

    values: dict[str, str]
    errors: dict[str, list[str]]


async def _visible_repository(viewer: Viewer, host: str, owner: str, name: str) -> RegisteredRepository | None:
    repository = await queries.get_repository(host.lower(), owner.lower(), name.lower())
    if repository is None or not repository_visible(viewer, repository["listing_status"]):
        return None
    return repository


async def repository_page(request: Request) -> Response:
    host, owner, name = (request.path_params[k] for k in ("host", "owner", "name"))
    viewer = await viewer_for(request)
    as_json = wants_json(request)
    # one pooled connection for the page's reads (a reader each opened its own: six checkouts a page)
    async with db.shared_reads():
        repository = None
        if as_json:
            # A repository may itself be named `x.json`: the exact name wins, `x.json` is then the twin of `x` only
            # when no repository carries that name (and `x.json.json` is always the twin of `x.json`).
            repository = await _visible_repository(viewer, host, owner, name + JSON_SUFFIX)
            as_json = repository is None
        if repository is None:
            repository = await _visible_repository(viewer, host, owner, name)
        if repository is None:
            raise NotFound({"repository": ["not found"]}, message="No repository is recorded at this address.")
        async with db.reader() as read:
            reports = await list_repository_reports(
                read, repository["id"], repository["listing_status"], viewer=viewer, limit=REPOSITORY_REPORTS
            )
            shown = [f["public_id"] for r in reports for f in r["findings"]]
            # the maintainers' voice beside each finding: its current statement (a hidden one is gone at once)
            statements = await current_by_occurrences(read, shown)
            # each finding's newest observation: the twin's alone (the page does not show it)
            observed = await observations.latest_by_occurrences(read, shown) if as_json else {}
        infestations = await list_repository_infestations(repository["id"], limit=REPOSITORY_INFESTATIONS)
        maintainers = await current_maintainers(repository["id"])
        burden = await burden_of(repository["id"])
        # the stub of its findings under coordinated disclosure: severity and dates only
        disclosures = await repository_disclosures(repository["id"])
    path = repo_path(repository["host"], repository["owner"], repository["name"])
    # for the shared cache (a privileged answer drops them, cache_headers): the repository, and the patterns whose
    # spread it lists, which another repository's report moves (the drain purges the keys it refreshed)
    tags = [repository_tag(repository["id"]), *(pattern_tag(item["pattern_key"]) for item in infestations)]
    if as_json:
        return json_twin(
            RepositoryRecord(
                repository=public_repository(repository),
                reports=[_record_report(r, statements, observed) for r in reports],
                infestations=[as_answer(RepositoryInfestation, item) for item in infestations],
                maintainers=repository_maintainers(maintainers),
                burden=burden,
                disclosures=disclosures,
            ),
            cache=cache_for(viewer),
            tags=tags,
        )
    context = {
        "repository": repository,
        "reports": reports,
        "infestations": infestations,
        "statements": statements,
        "maintainers": maintainers,
        "burden": burden,
        "disclosures": disclosures,
        "html_time": html_time,
        "review_words": REVIEW_STATUS_WORDS,
        "external_url": repository["canonical_url"] if repository["canonical_url"].startswith("https://") else None,
        "marks": await _marks(request, viewer, repository, [(r["id"], r["visibility"]) for r in reports]),
    }
    return page(request, "site/repository.html", context, json_url=twin_path(path), cache=cache_for(viewer), tags=tags)


def _record_report(
    report: RepositoryReport, statements: dict[str, StatementView], observed: dict[str, Observation]
) -> RecordReport:
    full = report["access"] == "full"  # summary-only: the header, nothing about its findings
    return RecordReport(
        **columns(report, "id commit_sha model provenance review_kind review_status visibility"),
        inserted_at=iso(report["inserted_at"]),
        findings_count=report["findings_count"] if full else UNSET,
        findings=[_record_finding(f, statements.get(str(f["public_id"])), observed) for f in report["findings"]]
        if full
        else UNSET,
    )


def _record_finding(
    f: ReportFindingRow, statement: StatementView | None, observed: dict[str, Observation]
) -> RecordFinding:
    return RecordFinding(
        **columns(f, OCCURRENCE_COLUMNS),
        public_id=str(f["public_id"]),
        url=finding_path(f["public_id"]),
        maintainer_statement=maintainer_statement(statement),
        observation=observed.get(str(f["public_id"])),
    )


def _parse_public_id(raw: str) -> uuid.UUID | None:
    try:
        parsed = uuid.UUID(raw)
    except ValueError:
        return None
    return parsed if str(parsed) == raw else None  # one address per finding: canonical lowercase form


WITHDRAWAL_REASONS = {
    "moderation": "withdrawn by moderation",
    "repository": "its repository is no longer listed",
    "deleted": "deleted from the registry",
}


def _tombstone(request: Request, public_id: str, withdrawn_at: datetime, reason: str) -> Response:
    """410 Gone for a finding that was public: its id, when and the reason class, never its repository or text."""
    if wants_json(request):
        body = Tombstone(finding=public_id, withdrawn_at=withdrawn_at.isoformat(), reason=reason)
        return json_twin(body, status_code=410, cache=ERROR_CACHE)
    context = {"public_id": public_id, "withdrawn_at": withdrawn_at, "reason_text": WITHDRAWAL_REASONS[reason]}
    return page(request, "site/withdrawn.html", context, status_code=410, cache=ERROR_CACHE)


async def finding_page(request: Request) -> Response:
    public_id = _parse_public_id(request.path_params["ref"])
    viewer = await viewer_for(request)
    found, statement = None, None
    if public_id is not None:
        async with db.reader() as read:  # one statement: the finding, its checks, ledger and statement
            rows = await read.maps(_FINDING_PAGE, finding_params(public_id))
        if rows:
            statement = statement_in(rows[0])
            found = finding_of(rows[0], viewer)
    if found is None and public_id is not None:
        # a canonical finding's id (what checks and statements take): its newest public occurrence
        occurrence = await newest_public_occurrence(public_id)
        if occurrence is not None:
            target = finding_path(occurrence)
            location = twin_path(target) if wants_json(request) else target
            return RedirectResponse(location, status_code=303, headers={"Cache-Control": PUBLIC_CACHE})
        async with db.read_session() as session:
            withdrawn = await withdrawn_finding(session, public_id)
        if withdrawn is not None:
            return _tombstone(request, str(public_id), *withdrawn)
    if found is None:
        raise NotFound({"finding": ["not found"]}, message="No public finding is recorded at this address.")
    finding, ledger = found[0], observations.ledger_of(found[1])
    if wants_json(request):
        record = _finding_record(finding, statement, ledger, await finding_disclosure(finding["canonical_id"]))
        return json_twin(record, cache=cache_for(viewer), tags=finding_tags(finding))
    return await render_finding(request, viewer, finding, statement, ledger=ledger)


async def load_finding(request: Request, raw: str) -> tuple[Viewer, FindingRow | None]:
    """The viewer, and the finding at `/findings/{raw}` if they may see it in full."""
    public_id = _parse_public_id(raw)
    viewer = await viewer_for(request)
    return viewer, await get_finding(public_id, viewer=viewer) if public_id is not None else None


async def render_finding(
    request: Request,
    viewer: Viewer,
    finding: FindingRow,
    statement: StatementView | None,
    *,
    form: StatementForm | None = None,
    status_code: int = 200,
    ledger: list[Observation] | None = None,
) -> Response:
    """The finding page. A signed-in maintainer of its repository (in good standing) gets the statement form and a
    moderator every statement with the hide/show form: such a page is `private, no-store`. `form` holds what was
    typed and the errors of a refused statement; `ledger`, the finding's observations when already read."""
    if ledger is None:
        ledger = await observations.ledger(finding["canonical_id"])
    context: dict[str, Any] = {
        "finding": finding,
        "statement": statement,
        "statement_form": None,
        "moderated": [],
        "vex_statuses": VEX_STATUSES,
        "vex_justifications": VEX_JUSTIFICATIONS,
        "statement_max_text": MAX_TEXT,
        "observed": [observations.words(e) for e in ledger],
    }
    cache = cache_for(viewer)
    account = await current_account(request) if viewer.account_id is not None else None
    canonical_id = finding["canonical_id"]
    if account is not None and canonical_id is not None:
        public = finding["visibility"] == "public" and finding["listing_status"] == "listed"
        if public and in_good_standing(account) and await is_current_maintainer(finding["repository_id"], account.id):
            context["statement_form"] = form or {"values": {}, "errors": {}}
            cache = PRIVATE_CACHE
        if can_moderate(account):
            context["moderated"] = await statements_of(canonical_id)
            cache = PRIVATE_CACHE
    hidden_statements = [(s.id, s.visibility) for s in context["moderated"]]
    context["marks"] = await _marks(
        request, viewer, finding, [(finding["scan_id"], finding["visibility"])], hidden_statements
    )
    json_url = twin_path(finding_path(finding["public_id"]))
    tags = finding_tags(finding) if status_code == 200 else None
    return page(
        request, "site/finding.html", context, json_url=json_url, cache=cache, status_code=status_code, tags=tags
    )


async def _marks(
    request: Request,
    viewer: Viewer,
    repository: RegisteredRepository | FindingRow,
    reports: list[tuple[int, str]],
    statements: list[tuple[int, str]] | None = None,
) -> Marks | None:
    """A privileged viewer's markers on what the public cannot see here (docs/domain.md §8), None for the public;
    the audit links are for moderators."""
    if not viewer.privileged:
        return None
    slug = ref_slug(repository["host"], repository["owner"], repository["name"])
    moderator = can_moderate(await current_account(request))
    return await page_marks(
        repository=(slug, repository["listing_status"]),
        reports=reports,
        statements=statements or (),
        audit_links=moderator,
    )


def finding_tags(finding: FindingRow) -> list[str]:
    """The shared cache's tags of a finding page: its repository, this occurrence (the scan_findings id) and its
    pattern (the page links the pattern's infestation while it has one, which other repositories' reports change)."""
    tags = [repository_tag(finding["repository_id"]), occurrence_tag(finding["id"])]
    if finding["pattern_key"]:
        tags.append(pattern_tag(finding["pattern_key"]))
    return tags


def _finding_record(
    f: FindingRow, statement: StatementView | None, ledger: list[Observation], disclosure: DisclosureAnswer
) -> FindingRecord:
    detail = finding_detail(f)
    checks = [
        FindingCheck(
            verdict=c["verdict"],
            provenance=c["provenance"],
            commit_sha=c["commit_sha"],
            inserted_at=iso(c["inserted_at"]),
        )
        for c in f["checks"]
    ]
    return FindingRecord(
        finding=detail,
        checks=checks,
        maintainer_statement=maintainer_statement(statement),
        observations=ledger,
        disclosure=disclosure,
    )


routes: list[BaseRoute] = [
    Route(
        "/repos/{host}/{owner}/{name:stem}{format:format}", repository_page, methods=["GET", "HEAD"], name="repository"
    ),
    Route("/findings/{ref:stem}{format:format}", finding_page, methods=["GET", "HEAD"], name="finding"),
]
