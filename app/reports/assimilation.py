"""Assimilation: link a new report's occurrences to their canonical findings, in the submit transaction
(docs/domain.md §2.6; `updated_at` moves only on a real change, §2.7). `assimilate_report` stores a report's
findings already linked (the submit path); `assimilate_scan` links occurrences stored unlinked."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.kernel import db
from app.kernel.sql import Fragment, compose, statement
from app.record.outbox import mark_dirty
from app.reports.counters import REFRESH_COUNTERS as REFRESH_COUNTERS  # re-exported: a CTE of app.reports.service's
from app.reports.counters import refresh_counters_of
from app.reports.finding_memory import fingerprint, legacy_fingerprint, pattern_key
from app.reports.models import Scan
from app.reports.quorum import recompute_canonical_statuses
from app.reports.validation import FindingInput

_OCCURRENCES = """
SELECT id, file_path, line_start, line_end, severity, title, description, disposition
FROM scan_findings WHERE scan_id = :scan_id AND canonical_finding_id IS NULL AND published_at IS NOT NULL
ORDER BY position, id
"""

# the canonicals already known by any of the given fingerprints (v2, or v1 for the legacy upgrade), with how many
# reports already carry each (this report's occurrences are not linked yet) and whether their status is the one
# no checks give (then a report cannot move it): one query per report, whatever its number of findings
FIND_KNOWN = Fragment("""
SELECT c.fingerprint, c.id, c.public_id, c.status, c.pattern_key,
       (SELECT count(DISTINCT f.scan_id) FROM scan_findings f
        WHERE f.canonical_finding_id = c.id AND f.published_at IS NOT NULL) AS prior,
       c.status = 'open' AND c.confirmations_count = 0 AND c.disputes_count = 0 AND c.verified_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM canonical_finding_checks ch WHERE ch.canonical_finding_id = c.id) AS unchecked
FROM canonical_findings c
WHERE c.repository_id = :repository_id AND c.fingerprint = ANY(CAST(:fingerprints AS text[]))
""")
_FIND = FIND_KNOWN.statement()

# legacy v1 upgrade: re-key the canonical to the v2 fingerprint and pattern key (a real change: bumps updated_at);
# returns the key it had, which must be recounted too
_UPGRADE_LEGACY = """
UPDATE canonical_findings c SET fingerprint = :fingerprint, pattern_key = :pattern_key, updated_at = now()
FROM (SELECT id, pattern_key FROM canonical_findings
      WHERE repository_id = :repository_id AND fingerprint = :legacy ORDER BY id LIMIT 1 FOR UPDATE) old
WHERE c.id = old.id
RETURNING c.id, c.public_id, c.status, c.pattern_key, old.pattern_key AS old_key
"""

# One statement for all of a report's new canonicals, inserted in position order (distinct fingerprints: one row
# may not be touched twice) with the counters their one report gives them (what `_REFRESH_COUNTERS` would count).
# ON CONFLICT survives a concurrent insert of the same canonical; that path replaces only pattern_key (updated_at
# untouched) and answers `inserted` false: such a canonical is then treated as known.
_INSERT_SQL = Fragment("""
INSERT INTO canonical_findings AS c
  (repository_id, fingerprint, pattern_key, file_path, line_start, line_end, severity, title, description,
   status, first_seen_commit_sha, last_seen_commit_sha, detections_count, distinct_submitters_count,
   distinct_models_count)
SELECT :repository_id, n.fingerprint, n.pattern_key, n.file_path, n.line_start, n.line_end, n.severity, n.title,
       n.description, 'open', :commit_sha, :commit_sha, 1, 1, :models
FROM unnest(CAST(:new_fingerprints AS text[]), CAST(:new_pattern_keys AS text[]), CAST(:new_file_paths AS text[]),
            CAST(:new_line_starts AS integer[]), CAST(:new_line_ends AS integer[]), CAST(:new_severities AS text[]),
            CAST(:new_titles AS text[]), CAST(:new_descriptions AS text[]))
     WITH ORDINALITY AS n(fingerprint, pattern_key, file_path, line_start, line_end, severity, title, description, pos)
ORDER BY n.pos
ON CONFLICT (repository_id, fingerprint) DO UPDATE SET pattern_key = EXCLUDED.pattern_key
RETURNING c.fingerprint, c.id, c.public_id, c.status, c.pattern_key, c.xmax = 0 AS inserted
""")
_INSERT = _INSERT_SQL.statement()

# how many reports already carry each canonical (a legacy upgrade's, or one a concurrent report inserted)
_PRIOR = """
SELECT canonical_finding_id, count(DISTINCT scan_id) FROM scan_findings
WHERE canonical_finding_id = ANY(CAST(:ids AS bigint[])) AND published_at IS NOT NULL GROUP BY canonical_finding_id
"""

_LINK = """
UPDATE scan_findings f SET canonical_finding_id = v.canonical_id, fingerprint = v.fingerprint,
  disposition = v.disposition, updated_at = now()
FROM unnest(CAST(:ids AS bigint[]), CAST(:canonical_ids AS bigint[]), CAST(:fingerprints AS text[]),
            CAST(:dispositions AS text[])) AS v(id, canonical_id, fingerprint, disposition)
WHERE f.id = v.id
"""

# A report's findings stored already linked, in position order (ids follow it): one statement
_STORE_TEMPLATE = """
INSERT INTO scan_findings
  (scan_id, position, file_path, line_start, line_end, severity, title, description, disposition,
   claimed_canonical_public_id, partial_fingerprints, canonical_finding_id, fingerprint, evidence_state, anchor,
   rule_id, held_reason, published_at)
SELECT :scan_id, n.position, n.file_path, n.line_start, n.line_end, n.severity, n.title, n.description,
       n.disposition, n.claimed, n.partials, {canonical_id}, n.fingerprint, n.evidence_state, n.anchor, n.rule_id,
       CAST(:held AS text), CASE WHEN CAST(:held AS text) IS NULL THEN now() END
FROM unnest(CAST(:positions AS integer[]), CAST(:file_paths AS text[]), CAST(:line_starts AS integer[]),
            CAST(:line_ends AS integer[]), CAST(:severities AS text[]), CAST(:titles AS text[]),
            CAST(:descriptions AS text[]), CAST(:dispositions AS text[]), CAST(:claimed AS uuid[]),
            CAST(:partials AS jsonb[]), CAST(:canonical_ids AS bigint[]), CAST(:fingerprints AS text[]),
            CAST(:evidence_states AS text[]), CAST(:anchors AS text[]), CAST(:rule_ids AS text[]))
     WITH ORDINALITY AS n(position, file_path, line_start, line_end, severity, title, description, disposition,
                          claimed, partials, canonical_id, fingerprint, evidence_state, anchor, rule_id, ord)
{new}
ORDER BY n.ord
RETURNING id, public_id
"""
_STORE = statement(_STORE_TEMPLATE, canonical_id=Fragment("n.canonical_id"), new=Fragment(""))
# The new canonicals and the findings in one statement, the findings' dispositions decided as if every new
# canonical were inserted now (no report carries it yet): the findings go in only if so. A concurrent insert of one
# of them (`inserted` false) stores no finding, and the caller decides again and stores them (`_STORE`). The
# findings read the new canonicals' ids from the insert's RETURNING rows, never from the table.
_INSERT_AND_STORE = statement(
    """
WITH new AS ({insert}), stored AS ({store})
SELECT 'canonical' AS what, fingerprint, id, public_id, status, pattern_key, inserted FROM new
UNION ALL
SELECT 'finding', NULL, id, public_id, NULL, NULL, NULL FROM stored
""",
    insert=_INSERT_SQL,
    store=compose(
        _STORE_TEMPLATE,
        canonical_id=Fragment("coalesce(n.canonical_id, new.id)"),
        new=Fragment(
            "LEFT JOIN new ON n.canonical_id IS NULL AND new.fingerprint = n.fingerprint "
            "WHERE NOT EXISTS (SELECT 1 FROM new WHERE NOT new.inserted)"
        ),
    ),
)


def disposition_for(prior_scans: int, canonical_status: str, sent: str) -> str:
    """§2.6 step 4: the server decides; only an agent-sent `regression` on a known finding survives."""
    if prior_scans == 0:
        return "new"
    if canonical_status == "fixed" or sent == "regression":
        return "regression"
    return "matches_existing"


@dataclass(frozen=True)
class Canonical:
    id: int
    public_id: uuid.UUID
    status: str
    pattern_key: str | None
    # no checks and the status they give: its quorum needs no recount (False: not known, recount)
    unchecked: bool = False


@dataclass(frozen=True)
class Link:
    """One occurrence's assimilation: its canonical, the v2 fingerprint and the disposition the server decided."""

    canonical: Canonical
    fingerprint: str
    disposition: str


@dataclass
class Assimilated:
    """A report's assimilation: a link per occurrence (in order), which canonicals this transaction created (no
    other report, check or feed entry can know them yet) and the pattern keys touched."""

    links: list[Link] = field(default_factory=list)
    created: set[int] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    rekeyed: set[str] = field(default_factory=set)  # keys a v1 upgrade moved a canonical away from
    # the findings' (id, public_id) in order when `_resolve` stored them with the new canonicals (else None)
    stored: list[tuple[int, uuid.UUID]] | None = None
    # known canonicals whose counters the caller refreshes (`REFRESH_COUNTERS`, ids `:ids`) in its last statement
    counters_due: list[int] = field(default_factory=list)

    @property
    def canonical_ids(self) -> list[int]:
        return sorted({link.canonical.id for link in self.links})

    @property
    def known_ids(self) -> list[int]:
        return [cid for cid in self.canonical_ids if cid not in self.created]

    @property
    def checked_ids(self) -> list[int]:
        """Known canonicals whose status a recount could move: checks exist, or a status no checks give."""
        unchecked = {link.canonical.id for link in self.links if link.canonical.unchecked}
        return [cid for cid in self.known_ids if cid not in unchecked]


def _canonical(row: Any) -> Canonical:
    return Canonical(
        int(row.id), row.public_id, str(row.status), row.pattern_key, bool(getattr(row, "unchecked", False))
    )


@dataclass(frozen=True)
class Fingerprints:
    """A report's findings' v2 and v1 fingerprints, in position order, and what `FIND_KNOWN` looks up."""

    v2: list[str]
    legacy: list[str]

    @property
    def wanted(self) -> list[str]:
        return sorted({*self.v2, *self.legacy})


def fingerprints_of(findings: Sequence[FindingInput]) -> Fingerprints:
    """The fingerprints of a report's findings (computed once, before its transaction)."""
    return Fingerprints(
        [fingerprint(f.file_path, f.line_start, f.title) for f in findings],
        [legacy_fingerprint(f.file_path, f.line_start, f.line_end, f.title) for f in findings],
    )


async def _resolve(
    session: AsyncSession,
    repository_id: int,
    commit_sha: str,
    model: str | None,
    occurrences: Sequence[Mapping[Any, Any]],
    *,
    fingerprints_found: tuple[Fingerprints, Iterable[Any]] | None = None,
    store: Mapping[str, Any] | None = None,
) -> Assimilated:
    """Every occurrence's canonical (known, upgraded from v1, or inserted now) and disposition, in position order:
    a read, at most an insert, and a statement only for what is rare (a v1 upgrade, a concurrent insert).
    `fingerprints_found`: the occurrences' fingerprints and the `FIND_KNOWN` rows a caller read for them already.
    `store`: `_STORE`'s per-finding parameters (the occurrences are a new report's findings, not stored yet): when
    canonicals are inserted, the findings go in with them (`_INSERT_AND_STORE`, `Assimilated.stored`)."""
    out = Assimilated()
    if not occurrences:
        return out
    if fingerprints_found is None:
        computed = Fingerprints(
            [fingerprint(o["file_path"], o["line_start"], o["title"]) for o in occurrences],
            [legacy_fingerprint(o["file_path"], o["line_start"], o["line_end"], o["title"]) for o in occurrences],
        )
        found = await db.rows(session, _FIND, {"repository_id": repository_id, "fingerprints": computed.wanted})
        fingerprints_found = (computed, found)
    fingerprints_v2, legacies = fingerprints_found[0].v2, fingerprints_found[0].legacy
    known: dict[str, tuple[Canonical, int | None]] = {
        str(r.fingerprint): (_canonical(r), int(r.prior)) for r in fingerprints_found[1]
    }
    resolved: dict[str, tuple[Canonical, int | None]] = {}  # v2 fingerprint -> (canonical, prior reports or None)
    new: dict[str, Mapping[Any, Any]] = {}  # v2 fingerprint -> its first occurrence, to insert
    for occ, fp, legacy in zip(occurrences, fingerprints_v2, legacies, strict=True):
        if fp in resolved or fp in new:
            continue
        if fp in known:
            resolved[fp] = known[fp]
            continue
        row = None
        if legacy in known:
            params = {"repository_id": repository_id, "fingerprint": fp, "legacy": legacy}
            row = (
                await session.execute(text(_UPGRADE_LEGACY), {**params, "pattern_key": pattern_key(occ["title"])})
            ).first()
        if row is None:
            new[fp] = occ
            continue
        known.pop(legacy)  # re-keyed: a later occurrence cannot upgrade it again
        resolved[fp] = (_canonical(row), None)
        if row.old_key and row.old_key != row.pattern_key:
            out.rekeyed.add(str(row.old_key))
    planned: list[str] | None = None  # the dispositions the findings were stored with, if they were
    if new:
        params = {
            "repository_id": repository_id,
            "commit_sha": commit_sha,
            "models": 0 if model is None else 1,
            "new_fingerprints": list(new),
            "new_pattern_keys": [pattern_key(o["title"]) for o in new.values()],
            "new_file_paths": [o["file_path"] for o in new.values()],
            "new_line_starts": [o["line_start"] for o in new.values()],
            "new_line_ends": [o["line_end"] for o in new.values()],
            "new_severities": [o["severity"] for o in new.values()],
            "new_titles": [o["title"] for o in new.values()],
            "new_descriptions": [o["description"] for o in new.values()],
        }
        if store is not None and all(prior is not None for _c, prior in resolved.values()):
            planned = _dispositions(occurrences, fingerprints_v2, resolved)
            ids = [resolved[fp][0].id if fp in resolved else None for fp in fingerprints_v2]
            more = {"dispositions": planned, "canonical_ids": ids, "fingerprints": fingerprints_v2}
            rows = await db.rows(session, _INSERT_AND_STORE, {**params, **store, **more})
            findings = [r for r in rows if r.what == "finding"]
            out.stored = sorted((int(r.id), r.public_id) for r in findings) if findings else None
            rows = [r for r in rows if r.what == "canonical"]
        else:
            rows = await db.rows(session, _INSERT, params)
        for r in rows:
            resolved[str(r.fingerprint)] = (_canonical(r), 0 if r.inserted else None)
            if r.inserted:
                out.created.add(int(r.id))
    unknown = sorted({c.id for c, prior in resolved.values() if prior is None})
    counted: dict[int, int] = {}
    if unknown:
        counted = {int(cid): int(n) for cid, n in await session.execute(text(_PRIOR), {"ids": unknown})}
    # §2.6 step 4 in position order: an earlier occurrence of this report already counts as a prior report
    seen: set[int] = set()
    for occ, fp in zip(occurrences, fingerprints_v2, strict=True):
        canonical, prior = resolved[fp]
        earlier = (counted.get(canonical.id, 0) if prior is None else prior) + (1 if canonical.id in seen else 0)
        out.links.append(Link(canonical, fp, disposition_for(earlier, canonical.status, str(occ["disposition"]))))
        seen.add(canonical.id)
        if canonical.pattern_key:
            out.keys.add(canonical.pattern_key)
    if out.stored is not None and planned != [link.disposition for link in out.links]:
        raise AssertionError("findings stored with dispositions other than those decided")  # never: a bug
    return out


def _dispositions(
    occurrences: Sequence[Mapping[Any, Any]],
    fingerprints_v2: list[str],
    known: Mapping[str, tuple[Canonical, int | None]],
) -> list[str]:
    """§2.6 step 4 as the loop in `_resolve` decides it, before the new canonicals exist: an occurrence whose
    fingerprint is not `known` has a canonical inserted now (open, no report yet). Fingerprints stand for canonicals
    here: `known` holds one canonical per fingerprint (no v1 upgrade: its count is not known yet)."""
    decided: list[str] = []
    seen: set[str] = set()
    for occ, fp in zip(occurrences, fingerprints_v2, strict=True):
        canonical, prior = known.get(fp, (None, 0))
        earlier = (prior or 0) + (1 if fp in seen else 0)
        decided.append(
            disposition_for(earlier, "open" if canonical is None else canonical.status, str(occ["disposition"]))
        )
        seen.add(fp)
    return decided


async def _settle(
    session: AsyncSession, repository_id: int, assimilated: Assimilated, *, defer_counters: bool = False
) -> None:
    """Once the occurrences are linked: counters of the canonicals other reports already carry (the created ones
    were inserted with theirs) and the status of those with checks (no check can name a created one, and without
    checks the status stays open), then the keys a v1 upgrade left. `defer_counters`: the counters are left to the
    caller (`counters_due`) when nothing here reads them after (no status to recompute: it reads the last seen
    commit; no v1 upgrade)."""
    if defer_counters and not assimilated.checked_ids and not assimilated.rekeyed:
        assimilated.counters_due = assimilated.known_ids
    elif assimilated.known_ids:
        await refresh_counters_of(session, assimilated.known_ids)
    if assimilated.checked_ids:
        await recompute_canonical_statuses(session, assimilated.checked_ids)
    # the old key of a re-keyed canonical is dirtied in this transaction, or it would keep the canonical's instance
    # until the nightly reconcile (docs/domain.md §5.6)
    await mark_dirty(session, assimilated.rekeyed, "assimilate", repository_id=repository_id)


def finding_arrays(findings: Sequence[FindingInput]) -> dict[str, list[Any]]:
    """A report's findings as the parallel arrays a `scan_findings` insert unnests, one a column sent as is (the
    dispositions and evidence states aside: the linked path decides them, the pending one stores what was sent)."""
    return {
        "positions": [f.position for f in findings],
        "file_paths": [f.file_path for f in findings],
        "line_starts": [f.line_start for f in findings],
        "line_ends": [f.line_end for f in findings],
        "severities": [f.severity for f in findings],
        "titles": [f.title for f in findings],
        "descriptions": [f.description for f in findings],
        "claimed": [None if f.claimed_canonical_public_id is None else str(f.claimed_canonical_public_id)
                    for f in findings],
        "partials": [None if f.partial_fingerprints is None else json.dumps(f.partial_fingerprints)
                     for f in findings],
        "anchors": [f.anchor for f in findings],
        "rule_ids": [f.rule_id for f in findings],
    }  # fmt: skip


async def assimilate_report(
    session: AsyncSession,
    *,
    scan_id: int,
    repository_id: int,
    commit_sha: str,
    model: str | None,
    findings: Sequence[FindingInput],
    fingerprints_found: tuple[Fingerprints, Iterable[Any]] | None = None,
    defer_counters: bool = False,
    held: str | None = None,
) -> tuple[Assimilated, list[tuple[int, uuid.UUID]]]:
    """Store a new report's findings linked to their canonicals (the submit path): the assimilation and each
    finding's (id, public_id), in order. A fixed number of statements per report, whatever its number of
    findings (a 200-finding report is one request's work, docs/security.md); nothing re-read that it wrote.
    `fingerprints_found`: `fingerprints_of(findings)` and the `FIND_KNOWN` rows the caller read with its scan's insert.
    `defer_counters`: the known canonicals' counters may be left to the caller (`Assimilated.counters_due`)."""
    occurrences = [
        {
            "file_path": f.file_path,
            "line_start": f.line_start,
            "line_end": f.line_end,
            "severity": f.severity,
            "title": f.title,
            "description": f.description,
            "disposition": f.disposition,
        }
        for f in findings
    ]
    store = {
        **finding_arrays(findings),
        "scan_id": scan_id,
        "evidence_states": [f.evidence_state for f in findings],
        "held": held,  # held for review (app/reports/held.py): linked, unpublished
    }
    assimilated = await _resolve(
        session, repository_id, commit_sha, model, occurrences, fingerprints_found=fingerprints_found, store=store
    )
    if not findings:
        return assimilated, []
    stored = assimilated.stored
    if stored is None:  # no canonical was inserted, or one was inserted concurrently: stored apart
        links = assimilated.links
        rows = await db.rows(
            session,
            _STORE,
            {
                **store,
                "dispositions": [link.disposition for link in links],
                "canonical_ids": [link.canonical.id for link in links],
                "fingerprints": [link.fingerprint for link in links],
            },
        )
        stored = sorted((int(r.id), r.public_id) for r in rows)  # ids follow the insert's order
    await _settle(session, repository_id, assimilated, defer_counters=defer_counters)
    return assimilated, stored


async def assimilate_scan(session: AsyncSession, scan: Scan) -> set[str]:
    """Link every published occurrence of `scan` stored unlinked, in position order (a refused or expired one stays
    unlinked: it counts nowhere); returns the pattern keys touched."""
    occurrences = (await session.execute(text(_OCCURRENCES), {"scan_id": scan.id})).mappings().all()
    if not occurrences:
        return set()
    assimilated = await _resolve(session, scan.repository_id, scan.commit_sha, scan.model, occurrences)
    await session.execute(
        text(_LINK),
        {
            "ids": [o["id"] for o in occurrences],
            "canonical_ids": [link.canonical.id for link in assimilated.links],
            "fingerprints": [link.fingerprint for link in assimilated.links],
            "dispositions": [link.disposition for link in assimilated.links],
        },
    )
    await _settle(session, scan.repository_id, assimilated)
    return assimilated.keys
