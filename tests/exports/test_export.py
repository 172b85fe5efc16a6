"""Bulk export (issue 14 item 5): what it holds, its manifest and schemas, one snapshot under concurrent writes,
serving with ETag and Range, the stale export refused after a takedown and rebuilt by the worker, the CLI."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.models import Account
from app.exports import service
from app.exports.types import ExportFile
from app.kernel.answers import as_json
from app.moderation import service as moderation
from app.reports.service import submit_report
from jobs import worker
from tests import factories
from tests.exports.support import everything, manifest, records
from tests.harness import assert_one_line_error, tarakan
from tests.reports.support import finding, report_body
from tests.sql import execute

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = {
    "repositories.ndjson.gz": "repository.schema.json",
    "findings.ndjson.gz": "finding.schema.json",
    "patterns.ndjson.gz": "pattern.schema.json",
    "precision.ndjson.gz": "precision.schema.json",
}
NOTES = "Taken down while the owner is contacted about the disclosure."


@pytest.fixture(autouse=True)
def export_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "exports"
    monkeypatch.setenv("EXPORT_DIR", str(directory))
    service.clear_caches()
    yield directory
    service.clear_caches()


async def publish(owner: str, title: str, *, account: Account | None = None, **finding_fields: Any) -> dict[str, Any]:
    """A report with one finding on a new listed repository, through the real report service."""
    repo = await factories.create_repository(owner, "app")
    account = account or await factories.create_account()
    body = report_body(findings=[finding(title=title, **finding_fields)])
    return await submit_report(account, repo.host, repo.owner, repo.name, body)


async def test_export_holds_exactly_the_public_records_valid_against_the_schemas(tmp_path: Path) -> None:
    shown = await publish("shown", "Open redirect in next parameter")
    account = await factories.create_account()
    for owner, visibility in (("restricted", "restricted"), ("summary", "public_summary")):
        hidden = await publish(owner, f"Secret {owner} finding", account=account)
        await execute("UPDATE scans SET visibility = :v WHERE id = :id", v=visibility, id=hidden["id"])
    await publish("quarantined", "Secret quarantined finding")
    await execute("UPDATE repositories SET listing_status = 'quarantined' WHERE owner = 'quarantined'")
    await factories.create_repository("pending", "app", listing_status="pending")

    out = tmp_path / "snapshot"
    written = await service.write_export(out)

    assert manifest(out) == as_json(written)
    assert [f.name for f in written.files] == list(service.FILE_NAMES)
    for entry in written.files:
        body = (out / entry.name).read_bytes()
        assert entry.bytes == len(body)
        assert entry.sha256 == hashlib.sha256(body).hexdigest()
        assert entry.records == len(records(out, entry.name))
        schema = json.loads((ROOT / "docs" / "schemas" / SCHEMAS[entry.name]).read_text())
        validator = jsonschema_rs.validator_for(schema, validate_formats=True)
        for record in records(out, entry.name):
            validator.validate(record)
    assert datetime.fromisoformat(written.generated_at).tzinfo is not None

    repositories = records(out, "repositories.ndjson.gz")
    assert sorted(r["repository"] for r in repositories) == [
        "github.com/restricted/app",
        "github.com/shown/app",
        "github.com/summary/app",
    ]  # listed repositories (their public_summary / restricted reports are not findings of the export)
    [exported] = records(out, "findings.ndjson.gz")
    occurrence = shown["findings"][0]
    assert exported["finding"] == occurrence["public_id"]
    assert exported["canonical"] == occurrence["canonical_public_id"]
    assert (exported["repository"], exported["status"], exported["title"]) == (
        "github.com/shown/app",
        "open",
        "Open redirect in next parameter",
    )
    shown_repo = next(r for r in repositories if r["repository"] == "github.com/shown/app")
    assert exported["repository_id"] == shown_repo["repository_id"]
    text = everything(out)
    assert "Secret" not in text and "quarantined" not in text and "pending" not in text
    assert "@example.com" not in text  # no account data at all


async def test_rows_are_streamed_in_bounded_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory stays flat whatever the registry's size: rows reach the file a batch at a time, never all at once."""
    repo = await factories.create_repository("many", "app")
    body = report_body(findings=[finding(title=f"Unchecked input {n}", file=f"src/{n}.py") for n in range(7)])
    await submit_report(await factories.create_account(), repo.host, repo.owner, repo.name, body)
    lines_per_write: list[int] = []

    class CountingGzip(gzip.GzipFile):
        def write(self, data: Any) -> int:
            lines_per_write.append(bytes(data).count(b"\n"))
            return super().write(data)

    monkeypatch.setattr(service, "STREAM_BATCH", 3)
    monkeypatch.setattr(gzip, "GzipFile", CountingGzip)
    out = tmp_path / "snapshot"
    await service.write_export(out)
    assert len(records(out, "findings.ndjson.gz")) == 7
    assert max(lines_per_write) <= 3 and lines_per_write.count(3) >= 2


async def test_one_snapshot_while_writers_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A report committed while the export is between its files is in none of them, and the feed position in the
    manifest is before it: the export is one repeatable-read snapshot, not three reads."""
    await publish("before", "Path traversal in upload")
    write_file = service._write_file
    during: list[dict[str, Any]] = []

    async def write_then_commit_a_report(session: AsyncSession, *args: Any) -> ExportFile:
        mode = (
            await session.execute(
                text("SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')")
            )
        ).one()
        assert tuple(mode) == ("repeatable read", "on")
        written = await write_file(session, *args)
        if not during:  # after the first file, in another transaction
            during.append(await publish("during", "Path traversal in upload"))
        return written

    monkeypatch.setattr(service, "_write_file", write_then_commit_a_report)
    out = tmp_path / "snapshot"
    written = await service.write_export(out)

    assert during, "the concurrent report was committed"
    assert [r["repository"] for r in records(out, "repositories.ndjson.gz")] == ["github.com/before/app"]
    assert [f["repository"] for f in records(out, "findings.ndjson.gz")] == ["github.com/before/app"]
    # a fresh export sees it, and its cursor moved on
    again = await service.write_export(tmp_path / "again")
    assert len(records(tmp_path / "again", "findings.ndjson.gz")) == 2
    assert again.changes_cursor != written.changes_cursor


async def test_served_with_etag_and_range_404_without_an_export(client: httpx.AsyncClient, export_dir: Path) -> None:
    missing = await client.get("/exports/manifest.json")
    assert missing.status_code == 404 and "export" in missing.json()["errors"]
    await publish("served", "Weak hash for session ids")
    await service.rebuild_export()

    got = await client.get("/exports/manifest.json")
    assert got.status_code == 200 and got.headers["content-type"].startswith("application/json")
    served = got.json()
    assert got.headers["etag"] == f'"{hashlib.sha256(got.content).hexdigest()}"'
    entry = next(f for f in served["files"] if f["name"] == "findings.ndjson.gz")

    whole = await client.get("/exports/findings.ndjson.gz")
    assert whole.status_code == 200 and whole.headers["accept-ranges"] == "bytes"
    assert whole.headers["etag"] == f'"{entry["sha256"]}"'
    assert whole.headers["cache-control"] == "no-cache"  # revalidated at every use: a takedown shows at once
    assert hashlib.sha256(whole.content).hexdigest() == entry["sha256"] and len(whole.content) == entry["bytes"]

    part = await client.get("/exports/findings.ndjson.gz", headers={"Range": "bytes=10-29"})
    assert part.status_code == 206 and part.content == whole.content[10:30]
    assert part.headers["content-range"] == f"bytes 10-29/{entry['bytes']}"
    resumed = await client.get(
        "/exports/findings.ndjson.gz", headers={"Range": "bytes=10-", "If-Range": whole.headers["etag"]}
    )
    assert resumed.status_code == 206 and resumed.content == whole.content[10:]
    changed = await client.get("/exports/findings.ndjson.gz", headers={"Range": "bytes=10-", "If-Range": '"other"'})
    assert changed.status_code == 200 and changed.content == whole.content  # another export: the whole file

    cached = await client.get("/exports/findings.ndjson.gz", headers={"If-None-Match": whole.headers["etag"]})
    assert cached.status_code == 304 and cached.content == b""
    head = await client.head("/exports/patterns.ndjson.gz")
    assert head.status_code == 200 and head.content == b""
    assert (await client.get("/exports/accounts.ndjson.gz")).status_code == 404
    assert (await client.get("/exports/..%2Fmanifest.json")).status_code == 404


async def test_takedown_makes_the_export_unservable_until_the_worker_rebuilds_it(
    client: httpx.AsyncClient, export_dir: Path
) -> None:
    kept = await publish("kept", "Missing CSRF token on settings")
    taken = await publish("taken", "Hardcoded credentials in deploy script")
    now = datetime.now(UTC)
    assert await worker.export_job({}, slot=now.isoformat()) is True  # none yet: built at once
    assert (await client.get("/exports/findings.ndjson.gz")).status_code == 200
    assert await service.export_due(now) is None

    moderator = await factories.create_account(platform_role="moderator")
    await moderation.change_scan_visibility(moderator, taken["id"], "restricted", "takedown", NOTES)

    for path in ("/exports/manifest.json", "/exports/findings.ndjson.gz"):  # the very next request, no worker
        refused = await client.get(path)
        assert refused.status_code == 503, path
        assert int(refused.headers["retry-after"]) == service.STALE_RETRY_AFTER
        assert "Hardcoded" not in refused.text
    assert await service.export_due(now) == "takedown"

    assert await worker.export_job({}, slot=(now + timedelta(minutes=1)).isoformat()) is True
    [fresh] = service.list_exports()  # the stale one is deleted, not only superseded
    assert not any(
        f["canonical"] == taken["findings"][0]["canonical_public_id"] for f in records(fresh.path, "findings.ndjson.gz")
    )
    assert "Hardcoded" not in everything(fresh.path)
    served = await client.get("/exports/findings.ndjson.gz")
    assert served.status_code == 200
    assert kept["findings"][0]["public_id"].encode() in gzip.decompress(served.content)
    # nothing due until a day later
    assert await worker.export_job({}, slot=(now + timedelta(minutes=2)).isoformat()) is False
    assert await service.export_due(now + timedelta(days=1, minutes=5)) == "daily"


async def test_retention_keeps_the_newest_exports(export_dir: Path) -> None:
    await publish("kept", "Unbounded file upload size")
    names = [(await service.rebuild_export())["export"] for _ in range(service.KEEP_EXPORTS + 2)]
    assert [e.path.name for e in service.list_exports()] == names[::-1][: service.KEEP_EXPORTS]


async def test_cli_writes_an_export_and_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await publish("cli", "Reflected XSS in search")
    out = tmp_path / "cli-export"
    done = await tarakan("export", "--out", str(out))
    assert done.code == 0, done.err
    assert "findings.ndjson.gz: 1 records" in done.out and "changes_cursor" in done.out
    assert len(records(out, "findings.ndjson.gz")) == 1

    assert_one_line_error(await tarakan("export", "--out", str(out)), "is not an empty directory")
    file_in_the_way = tmp_path / "a-file"
    file_in_the_way.write_text("x")
    with pytest.raises(service.ExportError, match="is not an empty directory"):
        await service.write_export(file_in_the_way)
    with pytest.raises(OSError):  # the CLI prints an OSError as one line too (app.cli.infrastructure_failure)
        await service.write_export(Path("/proc/tarakan-export"))
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:9/nothing")
    down = await tarakan("export", "--out", str(tmp_path / "never"))
    assert_one_line_error(down, "database")
    assert not (tmp_path / "never").exists() and not list(tmp_path.glob(".never*"))
