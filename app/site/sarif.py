"""SARIF 2.1.0 out: `/repos/{host}/{owner}/{name}/findings.sarif`, a repository's public findings as one log for a
code-scanning service (docs/sarif.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import quote

from sqlalchemy import bindparam, select
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.kernel import db
from app.kernel.answers import as_json
from app.kernel.config import settings
from app.kernel.errors import NotFound
from app.kernel.shared_cache import occurrence_tag, repository_tag
from app.kernel.sql import compiled, statement
from app.kernel.urls import finding_path, infestation_path, repo_path
from app.kernel.web import document_response
from app.maintainers.statement_queries import StatementView, current_by_canonical_ids
from app.record.public import listed_repository, public_occurrence
from app.record.rendered import rendered_once
from app.registry.models import Repository
from app.reports.embargo import DISCLOSURE_FRAGMENT, DisclosureAnswer, disclosure_answer

SARIF_MEDIA_TYPE = "application/sarif+json"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
MAX_RESULTS = 5000  # a bounded document; past it the run says `truncated`
FINGERPRINT_KEY = "tarakanFingerprint/v2"  # the canonical fingerprint (docs/domain.md §2.3)
LEVELS = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "none"}
# the score code-scanning services read (`security-severity`), the middle of each severity's band
SCORES = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "2.0", "info": "0.0"}
NOT_PUBLIC = "No public repository is recorded at this address."

_R = Repository.__table__.alias("r")
_REPOSITORY = compiled(
    select(_R.c.id, _R.c.host, _R.c.owner, _R.c.name, _R.c.canonical_url).where(
        _R.c.host == bindparam("host"),
        _R.c.owner == bindparam("owner"),
        _R.c.name == bindparam("name"),
        listed_repository(_R),
    )
)

# One row per canonical finding with a public occurrence in a listed repository: its newest public occurrence.
_FINDINGS = statement(
    """
SELECT * FROM (
  SELECT DISTINCT ON (c.id)
         c.id, c.fingerprint, c.pattern_key, c.status, c.public_id AS canonical_public_id,
         f.id AS occurrence_id, f.public_id, f.title, f.severity, f.file_path, f.line_start, f.line_end,
         s.commit_sha, {disclosure}
  FROM canonical_findings c
  JOIN scan_findings f ON f.canonical_finding_id = c.id
  JOIN scans s ON s.id = f.scan_id
  JOIN repositories r ON r.id = c.repository_id
  LEFT JOIN disclosures d ON d.canonical_finding_id = c.id
  WHERE c.repository_id = :repository_id AND {public}
  ORDER BY c.id, s.inserted_at DESC, f.id DESC
) newest
ORDER BY id
LIMIT :limit
""",
    public=public_occurrence(),
    disclosure=DISCLOSURE_FRAGMENT,
)


class SarifRepository(NamedTuple):
    id: int
    host: str
    owner: str
    name: str
    canonical_url: str


class SarifFinding(NamedTuple):
    """A canonical finding with its newest public occurrence (`occurrence_id`, `public_id`, ...) and its clock."""

    id: int  # the canonical's
    fingerprint: str
    pattern_key: str | None
    status: str
    canonical_public_id: uuid.UUID
    occurrence_id: int
    public_id: uuid.UUID
    title: str
    severity: str
    file_path: str
    line_start: int | None
    line_end: int | None
    commit_sha: str
    disclosure: DisclosureAnswer


_READ_FIELDS = SarifFinding._fields[:-1]  # the read's columns; the clock is built from its disclosure columns


async def public_repository(host: str, owner: str, name: str) -> SarifRepository:
    """The listed repository at these coordinates, or NotFound (quarantined, pending, delisted or unknown alike)."""
    async with db.read_session() as session:
        row = (
            (await session.execute(_REPOSITORY, {"host": host.lower(), "owner": owner.lower(), "name": name.lower()}))
            .mappings()
            .first()
        )
    if row is None:
        raise NotFound({"repository": ["not found"]}, message=NOT_PUBLIC)
    return SarifRepository(**row)


async def public_findings(repository_id: int, *, limit: int = MAX_RESULTS) -> list[SarifFinding]:
    async with db.read_session() as session:
        result = await session.execute(_FINDINGS, {"repository_id": repository_id, "limit": limit})
        rows = [dict(row) for row in result.mappings()]
    return [
        SarifFinding(**{name: row[name] for name in _READ_FIELDS}, disclosure=disclosure_answer(row)) for row in rows
    ]


def _rule(key: str, title: str, base_url: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"id": key, "shortDescription": {"text": title}}
    if key != "unkeyed":
        rule["helpUri"] = base_url + infestation_path(key)  # the pattern across the registry
    return rule


def _statement(result: dict[str, Any], statement: StatementView) -> None:
    """The maintainers' current statement on the result (docs/sarif.md): `not_affected` is an accepted external
    suppression (code-scanning services then hide or mark the alert), every status a property."""
    if statement.status == "not_affected":
        reason = statement.justification or ""
        if statement.impact_statement:
            reason = f"{reason}: {statement.impact_statement}" if reason else statement.impact_statement
        result["suppressions"] = [{"kind": "external", "status": "accepted", "justification": reason}]
    result["properties"]["maintainer_statement"] = {
        "status": statement.status,
        "justification": statement.justification,
        "impact_statement": statement.impact_statement,
        "action_statement": statement.action_statement,
        "fixed_in": statement.fixed_in,
        "author": statement.author,
        "at": statement.at.isoformat(),
    }


def _result(finding: SarifFinding, rule_index: int, key: str, base_url: str) -> dict[str, Any]:
    region: dict[str, Any] = {}
    if finding.line_start is not None:
        region = {"startLine": finding.line_start, "endLine": finding.line_end or finding.line_start}
    location: dict[str, Any] = {
        "artifactLocation": {"uri": quote(finding.file_path), "uriBaseId": "%SRCROOT%"},
    }
    if region:
        location["region"] = region
    url = base_url + finding_path(finding.public_id)
    return {
        "ruleId": key,
        "ruleIndex": rule_index,
        "level": LEVELS.get(finding.severity, "warning"),
        "message": {"text": finding.title},
        "locations": [{"physicalLocation": location}],
        "partialFingerprints": {FINGERPRINT_KEY: finding.fingerprint},
        "hostedViewerUri": url,
        "properties": {
            "status": finding.status,
            "severity": finding.severity,
            "security-severity": SCORES.get(finding.severity, "0.0"),
            "finding": str(finding.public_id),
            "canonical": str(finding.canonical_public_id),
            "commit": finding.commit_sha,
            # its coordinated-disclosure clock: `published` with how it ended, or `immediate`
            "disclosure": as_json(finding.disclosure),
        },
    }


def sarif_log(
    repository: SarifRepository,
    findings: list[SarifFinding],
    *,
    truncated: bool,
    statements: Mapping[int, StatementView] | None = None,
) -> dict[str, Any]:
    """One run, tool "Tarakan", one rule per pattern, one result per public finding (with its maintainers' current
    statement from `statements`, by canonical id)."""
    base_url = settings().base_url
    rules: list[dict[str, Any]] = []
    index_of: dict[str, int] = {}
    results = []
    for finding in findings:
        key = finding.pattern_key or "unkeyed"
        if key not in index_of:
            index_of[key] = len(rules)
            rules.append(_rule(key, finding.title, base_url))
        result = _result(finding, index_of[key], key, base_url)
        if statements and (statement := statements.get(finding.id)) is not None:
            _statement(result, statement)
        results.append(result)
    slug = f"{repository.host}/{repository.owner}/{repository.name}"
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "Tarakan",
                "informationUri": base_url + "/",
                "rules": rules,
            }
        },
        "originalUriBaseIds": {"%SRCROOT%": {"description": {"text": f"The root of {slug}"}}},
        "results": results,
        "properties": {
            "repository": slug,
            "record": base_url + repo_path(repository.host, repository.owner, repository.name),
            "truncated": truncated,
        },
    }
    if repository.canonical_url.startswith("https://"):
        run["versionControlProvenance"] = [{"repositoryUri": repository.canonical_url}]
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


@rendered_once()
async def findings_sarif(request: Request) -> Response:
    p = request.path_params
    repository = await public_repository(p["host"], p["owner"], p["name"])
    findings = await public_findings(repository.id, limit=MAX_RESULTS + 1)
    shown = findings[:MAX_RESULTS]
    statements = await current_by_canonical_ids(f.id for f in shown)
    log = sarif_log(repository, shown, truncated=len(findings) > MAX_RESULTS, statements=statements)
    body = json.dumps(log, ensure_ascii=False, separators=(",", ":")).encode()
    # its repository, and each occurrence it shows (up to MAX_RESULTS: a quarantine purges the repository anyway)
    tags = [repository_tag(repository.id), *(occurrence_tag(f.occurrence_id) for f in shown)]
    return document_response(request, body, SARIF_MEDIA_TYPE, tags=tags)


routes: list[BaseRoute] = [
    Route(
        "/repos/{host}/{owner}/{name}/findings.sarif", findings_sarif, methods=["GET", "HEAD"], name="findings_sarif"
    ),
]
