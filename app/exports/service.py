"""The bulk export: one snapshot of all public data as gzipped NDJSON and a manifest, its retention and what may
be served (docs/domain.md §13 "Bulk export", docs/operations.md "Bulk export")."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import logging
import shutil
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import msgspec
from sqlalchemy import Row, TextClause, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.exports.types import ExportFile, ExportManifest
from app.kernel import db
from app.kernel.answers import as_json, encode
from app.kernel.config import ConfigError, settings
from app.kernel.errors import NotFound, ServiceUnavailable
from app.kernel.sql import Fragment, outer, statement
from app.maintainers.statement_queries import statement_hides_after
from app.record.changes import snapshot_cursor, withdrawals_after
from app.record.models import PublishedRepository
from app.record.public import listed_repository, public_occurrence, visible_pattern
from app.record.takedowns import TakedownKeyedCache
from app.reports.embargo import DISCLOSURE_FRAGMENT, disclosure_answer
from app.trust.precision import precision_rows

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
KEEP_EXPORTS = 3  # the newest ones kept in EXPORT_DIR (older ones, and any holding a withdrawn record, are deleted)
EXPORT_PERIOD = timedelta(days=1)  # the daily build
STREAM_BATCH = 1_000  # rows per fetch from the server-side cursor (bounded memory)
STALE_RETRY_AFTER = 120  # seconds a client waits for the rebuild after a takedown: the next minute tick + the build
WITHDRAWALS_CACHE_SECONDS = 5.0  # the request-time staleness check, dropped at the next request after a takedown

# `host/owner/name`, and the opaque id, as the change feed names a repository (its `published_repositories` row,
# written when the feed first announced it listed; NULL for a repository it has not announced yet)
_SLUG = Fragment("r.host || '/' || r.owner || '/' || r.name")
_PUBLISHED = PublishedRepository.__table__.alias("pr")
_OPAQUE_ID = select(_PUBLISHED.c.opaque_id).where(_PUBLISHED.c.repository_id == outer("r.id")).scalar_subquery()

# Each query yields one JSON text per record (built by Postgres: no per-row objects in Python), in a stable order
# so that two exports of the same data are byte-identical once decompressed.
_REPOSITORIES = statement(
    """
SELECT json_build_object(
  'repository', {slug}, 'repository_id', {opaque_id},
  'host', r.host, 'owner', r.owner, 'name', r.name, 'canonical_url', r.canonical_url,
  'status', r.status, 'scan_count', r.scan_count, 'open_findings_count', r.open_findings_count,
  'verified_findings_count', r.verified_findings_count, 'last_scanned_at', r.last_scanned_at,
  'description', r.description, 'primary_language', r.primary_language, 'stars_count', r.stars_count,
  'forks_count', r.forks_count, 'archived', r.archived, 'participation_mode', r.participation_mode,
  'registered_at', r.inserted_at
)::text
FROM repositories r
WHERE {listed}
ORDER BY r.id
""",
    slug=_SLUG,
    opaque_id=_OPAQUE_ID,
    listed=listed_repository(),
)

# the canonical's current maintainer statement (docs/domain.md "Maintainers"): the newest one no moderator hid; a
# hide is a withdrawal for `stale()` (its feed entry carries a reason), so an export holding it is rebuilt
_MAINTAINER_STATEMENT = Fragment("""(
  SELECT json_build_object(
    'status', st.status, 'justification', st.justification, 'impact_statement', st.impact_statement,
    'action_statement', st.action_statement, 'fixed_in', st.fixed_in, 'author', sa.handle, 'at', st.inserted_at)
  FROM finding_statements st LEFT JOIN accounts sa ON sa.id = st.author_id
  WHERE st.canonical_finding_id = c.id AND st.visibility = 'shown'
  ORDER BY st.inserted_at DESC, st.id DESC LIMIT 1
)""")

_FINDINGS = statement(
    """
SELECT json_build_object(
  'finding', f.public_id, 'canonical', c.public_id,
  'repository', {slug}, 'repository_id', {opaque_id},
  'status', c.status, 'pattern_key', c.pattern_key,
  'title', f.title, 'severity', f.severity, 'description', f.description,
  'file_path', f.file_path, 'line_start', f.line_start, 'line_end', f.line_end,
  'disposition', f.disposition, 'commit_sha', s.commit_sha, 'reported_at', s.inserted_at,
  'confirmations_count', c.confirmations_count, 'disputes_count', c.disputes_count,
  'verified_at', c.verified_at, 'status_updated_at', c.updated_at,
  'maintainer_statement', {maintainer_statement}, 'observations', c.observations
)::text, {disclosure}
FROM scan_findings f
JOIN scans s ON s.id = f.scan_id
JOIN repositories r ON r.id = s.repository_id
JOIN canonical_findings c ON c.id = f.canonical_finding_id
LEFT JOIN disclosures d ON d.canonical_finding_id = c.id
WHERE {public}
ORDER BY f.id
""",
    slug=_SLUG,
    opaque_id=_OPAQUE_ID,
    maintainer_statement=_MAINTAINER_STATEMENT,
    public=public_occurrence(),
    disclosure=DISCLOSURE_FRAGMENT,
)


def _finding_line(row: Row[Any]) -> str:
    """A finding record with its `disclosure` object, the one serializer's (app.reports.embargo), spliced in as its
    last key: Postgres builds the rest of the record, its clock's columns come beside it."""
    record: str = row[0]
    return record[:-1] + ',"disclosure":' + encode(disclosure_answer(dict(row._mapping))).decode() + "}"


def _first_column(row: Row[Any]) -> str:
    text_line: str = row[0]
    return text_line


@dataclass(frozen=True)
class Shaped:
    """A streamed query whose rows are made into lines in Python (`line`), not by Postgres alone."""

    query: TextClause
    line: Callable[[Row[Any]], str]


# Derived rows (the atlas rollups): what the atlas shows, under the read-time guard; they follow a takedown after
# the worker drains the pattern's key, like the atlas pages' counts.
_PATTERNS = statement(
    """
SELECT json_build_object(
  'pattern_key', p.pattern_key, 'title', p.title, 'severity', p.severity,
  'repo_count', p.repo_count, 'instance_count', p.instance_count, 'open_count', p.open_count,
  'verified_count', p.verified_count, 'fixed_count', p.fixed_count, 'disputed_count', p.disputed_count,
  'first_seen_at', p.first_seen_at, 'last_seen_at', p.last_seen_at, 'refreshed_at', p.refreshed_at
)::text
FROM infestation_patterns p
WHERE {visible}
ORDER BY p.pattern_key
""",
    visible=visible_pattern(outer("p.pattern_key")),
)


async def _precision(session: AsyncSession) -> list[str]:
    """The rows of `/stats/precision.json`, each with its `grouping` (a few hundred at most: built in Python)."""
    rows = await precision_rows(session)
    return [json.dumps({"grouping": name, **row.as_json()}) for name, group in rows.items() for row in group]


Lines = Callable[[AsyncSession], Awaitable[list[str]]]
FILES: tuple[tuple[str, TextClause | Shaped | Lines], ...] = (
    ("repositories.ndjson.gz", _REPOSITORIES),
    ("findings.ndjson.gz", Shaped(_FINDINGS, _finding_line)),
    ("patterns.ndjson.gz", _PATTERNS),
    ("precision.ndjson.gz", _precision),
)
FILE_NAMES = tuple(name for name, _ in FILES)


class ExportError(ConfigError):
    """A refused destination (the CLI prints it as one line)."""


@dataclass(frozen=True)
class Export:
    path: Path  # the export's directory
    manifest: ExportManifest

    @property
    def cursor(self) -> str:
        return self.manifest.changes_cursor

    def file(self, name: str) -> ExportFile | None:
        return next((f for f in self.manifest.files if f.name == name), None)


class Rebuilt(TypedDict):
    """What a rebuild did (the export job's result and its `job_runs` detail)."""

    export: str  # the new export's directory name
    records: dict[str, int]  # by file name
    deleted: int


def read_manifest(directory: Path) -> ExportManifest:
    """The manifest of the export in `directory` (OSError, or a ValueError when it is not one)."""
    return msgspec.json.decode((directory / MANIFEST).read_bytes(), type=ExportManifest)


# ---- building ---------------------------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


async def _write_file(session: AsyncSession, query: TextClause | Shaped | Lines, path: Path) -> ExportFile:
    records = 0
    # mtime 0: the bytes depend on the records only; compresslevel 6: ~3x faster than 9 for a few % more bytes
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as out:
        if not isinstance(query, TextClause | Shaped):
            lines = await query(session)
            out.write("".join(line + "\n" for line in lines).encode())
            records = len(lines)
        else:
            statement, line = (query.query, query.line) if isinstance(query, Shaped) else (query, _first_column)
            result = await session.stream(statement, execution_options={"yield_per": STREAM_BATCH})
            async for rows in result.partitions(STREAM_BATCH):
                out.write("".join(line(row) + "\n" for row in rows).encode())
                records += len(rows)
    return ExportFile(name=path.name, records=records, bytes=path.stat().st_size, sha256=_sha256(path))


async def write_export(out: Path) -> ExportManifest:
    """Write one export into the directory `out` (absent or empty; created), atomically: everything is written
    into a hidden sibling directory that is renamed to `out` at the end. Returns the manifest."""
    out = out.absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"--out {out}: exists and is not an empty directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    partial.mkdir()
    try:
        manifest = await _snapshot_into(partial)
        (partial / MANIFEST).write_text(json.dumps(as_json(manifest), indent=2) + "\n")
        if out.exists():
            out.rmdir()  # empty, checked above
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


async def _snapshot_into(directory: Path) -> ExportManifest:
    # One repeatable-read, read-only transaction on the primary: every file and the feed cursor see one snapshot.
    # UTC so that Postgres writes timestamps as `...+00:00`.
    async with async_sessionmaker(db.engine())() as session:
        await session.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        await session.execute(text("SET LOCAL TimeZone = 'UTC'"))
        generated_at = (await session.execute(text("SELECT now()"))).scalar_one()
        cursor = await snapshot_cursor(session)
        files = [await _write_file(session, query, directory / name) for name, query in FILES]
        await session.rollback()
    return ExportManifest(generated_at=generated_at.isoformat(), changes_cursor=cursor, files=files)


# ---- EXPORT_DIR: the exports the web serves ---------------------------------------------------------------------


def export_dir() -> Path:
    return Path(settings().export_dir)


def list_exports(directory: Path | None = None) -> list[Export]:
    """The complete exports in `directory` (EXPORT_DIR), newest first; partial and unreadable ones are skipped."""
    directory = directory or export_dir()
    exports = []
    try:
        entries = sorted((p for p in directory.iterdir() if not p.name.startswith(".")), reverse=True)
    except FileNotFoundError:
        return []
    for path in entries:
        try:
            manifest = read_manifest(path)
        except (OSError, ValueError):  # msgspec's decode and validation errors are ValueErrors
            continue
        exports.append(Export(path, manifest))
    return exports


def _stamp(at: datetime) -> str:
    # sortable by name: the newest export is the greatest name
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")


async def stale(export: Export) -> bool:
    """True when something was withdrawn after the export's snapshot (a finding, a repository, or a maintainer's
    statement a moderator hid): it may hold a record that is not public any more, and must not be served (a finding
    both published and withdrawn after it counts too: harmless)."""
    async with db.read_session(replica=False) as session:
        if await withdrawals_after(session, export.cursor) > 0:
            return True
        return await statement_hides_after(session, export.cursor)  # a maintainer's statement hidden since


async def export_due(now: datetime, directory: Path | None = None) -> str | None:
    """Why the worker should build an export now: `missing` (none yet), `takedown` (the newest one holds a record
    withdrawn since; the worker checks every minute, so takedowns within one minute share one rebuild), `daily`
    (the newest is older than a day); None when the newest one is fine."""
    exports = list_exports(directory)
    if not exports:
        return "missing"
    newest = exports[0]
    if await stale(newest):
        return "takedown"
    if now - datetime.fromisoformat(newest.manifest.generated_at) >= EXPORT_PERIOD:
        return "daily"
    return None


async def rebuild_export(directory: Path | None = None, *, keep: int = KEEP_EXPORTS) -> Rebuilt:
    """Build a new export into EXPORT_DIR, then delete the exports past the newest `keep`, those holding a
    withdrawn record, and partial directories left by a build that died. Returns a summary for `job_runs`."""
    directory = directory or export_dir()
    directory.mkdir(parents=True, exist_ok=True)
    # named after the build's start; renamed below to the snapshot's time, which orders exports by content
    building = directory / f".build-{uuid.uuid4().hex[:8]}"
    manifest = await write_export(building)
    final = directory / _stamp(datetime.fromisoformat(manifest.generated_at))
    building.rename(final)
    deleted = 0
    for index, export in enumerate(list_exports(directory)):
        if export.path != final and (index >= keep or await stale(export)):
            shutil.rmtree(export.path, ignore_errors=True)
            deleted += 1
    for leftover in directory.glob(".*"):
        if leftover.is_dir() and leftover.stat().st_mtime < datetime.now().timestamp() - 6 * 3600:
            shutil.rmtree(leftover, ignore_errors=True)  # a build that died hours ago
    log.info("export %s written (%s); %d older deleted", final.name, _summary(manifest), deleted)
    return {"export": final.name, "records": {f.name: f.records for f in manifest.files}, "deleted": deleted}


def _summary(manifest: ExportManifest) -> str:
    return ", ".join(f"{f.name} {f.records} records {f.bytes} bytes" for f in manifest.files)


# ---- serving ----------------------------------------------------------------------------------------------------

_withdrawals: TakedownKeyedCache[bool] = TakedownKeyedCache(lambda: WITHDRAWALS_CACHE_SECONDS, maxsize=8)


async def served_export() -> Export:
    """The export the web serves: the newest one in EXPORT_DIR, unless a withdrawal happened after its snapshot.
    404 when there is none; 503 with Retry-After while the rebuild after a takedown is pending (the answer is
    cached a few seconds, and dropped at the next request after any audited takedown)."""
    exports = await asyncio.to_thread(list_exports)
    if not exports:
        raise NotFound({"export": ["no export has been built yet"]}, message="No bulk export has been built yet.")
    newest = exports[0]
    if await _withdrawals.get(newest.cursor, lambda: stale(newest)):
        raise ServiceUnavailable(
            {"export": ["the newest export holds records withdrawn since it was built; it is being rebuilt"]},
            retry_after=STALE_RETRY_AFTER,
            message="The bulk export is being rebuilt after a takedown. Try again in a few minutes.",
        )
    return newest


def describe(manifest: ExportManifest) -> str:
    """One line per file, for the CLI."""
    return "\n".join(f"{f.name}: {f.records} records, {f.bytes} bytes, sha256 {f.sha256}" for f in manifest.files)


def clear_caches() -> None:
    _withdrawals.reset()


__all__ = [
    "FILE_NAMES",
    "KEEP_EXPORTS",
    "MANIFEST",
    "Export",
    "ExportError",
    "clear_caches",
    "describe",
    "export_dir",
    "export_due",
    "list_exports",
    "read_manifest",
    "rebuild_export",
    "served_export",
    "stale",
    "write_export",
]
