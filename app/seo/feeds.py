"""Atom 1.0 feeds: rising and new infestations, a pattern's new instances, a repository's new reports (docs/seo.md
"Atom feeds"). No entry names a person (docs/domain.md §1.2)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from app.infestations.models import UNKNOWN_TITLE
from app.infestations.queries import (
    get_infestation,
    list_infestations,
    list_instances_page,
    list_newest_infestations,
    parse_pattern_key,
)
from app.kernel.db import utcnow
from app.kernel.shared_cache import ATLAS_TAG, pattern_tag, repository_tag
from app.kernel.templating import environment
from app.kernel.urls import finding_path
from app.maintainers.statement_queries import repository_statements
from app.reports.models import REVIEW_STATUS_WORDS
from app.seo.queries import get_public_repository, list_public_reports
from app.seo.settings import seo_settings
from app.seo.sitemap import repository_path

TAG_YEAR = "2026"  # the tag URI date: fixed forever, or every id would change
FEED_ENTRIES = 30


@dataclass(frozen=True)
class Entry:
    id: str
    title: str
    link: str
    updated: datetime
    summary: str
    published: datetime | None = None
    category: str | None = None


@dataclass
class Feed:
    id: str
    title: str
    subtitle: str
    self_url: str
    alternate_url: str
    entries: list[Entry] = field(default_factory=list)
    fallback_updated: datetime | None = None
    tags: list[str] = field(default_factory=list)  # what it shows, for the shared cache (app.kernel.shared_cache)

    @property
    def updated(self) -> datetime:
        times = [e.updated for e in self.entries]
        if times:
            return max(times)
        return self.fallback_updated or utcnow()


def tag(kind: str, value: object) -> str:
    """`tag:{host},2026:{kind}:{value}` with the host of BASE_URL (a tag authority is a DNS name: no port)."""
    host = urlsplit(seo_settings().base_url).hostname or "localhost"
    return f"tag:{host},{TAG_YEAR}:{kind}:{value}"


def atom_time(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# XML 1.0 cannot carry most C0 controls even escaped; a hostile title must not break the whole feed
_NOT_XML_CHAR = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clean(value: object) -> str:
    return _NOT_XML_CHAR.sub("\ufffd", str(value))


def render(feed: Feed) -> str:
    template = environment.get_template("seo/feed.atom")
    return template.render(feed=feed, atom_time=atom_time, clean=clean)


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def _infestation_entry(base: str, item: dict[str, Any], spread: str) -> Entry:
    key = item["pattern_key"]
    updated = item.get("last_seen_at") or item.get("first_seen_at") or utcnow()
    return Entry(
        id=tag("infestation", key),
        title=str(item.get("title") or UNKNOWN_TITLE),
        link=f"{base}/infestations/{key}",
        updated=updated,
        published=item.get("first_seen_at"),
        category=item.get("severity"),
        summary=(
            f"{spread}: {_plural(int(item['repo_count']), 'repository')}, "
            f"{_plural(int(item['instance_count']), 'instance')} "
            f"({item.get('open_count', 0)} open, {item.get('verified_count', 0)} verified, "
            f"{item.get('fixed_count', 0)} fixed, {item.get('disputed_count', 0)} disputed)"
        ),
    )


async def infestations_feed() -> Feed:
    """Rising (top 7-day spread) then new (latest first sighting) infestations, each pattern once."""
    base = seo_settings().base_url
    feed = Feed(
        id=tag("feed", "infestations"),
        title="Tarakan: rising and new infestations",
        subtitle="Finding patterns spreading across listed repositories",
        self_url=f"{base}/infestations.atom",
        alternate_url=f"{base}/infestations",
        tags=[ATLAS_TAG],
    )
    seen: set[str] = set()
    for item in await list_infestations(days=7, min_repos=2, limit=FEED_ENTRIES // 2):
        seen.add(item["pattern_key"])
        feed.tags.append(pattern_tag(item["pattern_key"]))
        feed.entries.append(_infestation_entry(base, item, "Rising, last 7 days"))
    for item in await list_newest_infestations(limit=FEED_ENTRIES // 2):
        if item["pattern_key"] not in seen:
            seen.add(item["pattern_key"])
            feed.tags.append(pattern_tag(item["pattern_key"]))
            feed.entries.append(_infestation_entry(base, item, "New, all time"))
    return feed


async def infestation_feed(raw_key: str) -> Feed | None:
    """New instances of one pattern (newest first); None when the pattern is unknown."""
    key = parse_pattern_key(raw_key)
    if key is None:
        return None
    infestation = await get_infestation(key)
    if infestation is None:
        return None
    base = seo_settings().base_url
    feed = Feed(
        id=tag("feed", f"infestation:{key}"),
        title=f"Tarakan infestation: {infestation['title']}",
        subtitle=f"New instances of this pattern across {_plural(int(infestation['repo_count']), 'repository')}",
        self_url=f"{base}/infestations/{key}.atom",
        alternate_url=f"{base}/infestations/{key}",
        fallback_updated=infestation.get("last_seen_at"),
        tags=[ATLAS_TAG, pattern_tag(key)],
    )
    page = await list_instances_page(key, limit=FEED_ENTRIES)
    for entry in page["entries"]:
        repo = f"{entry['owner']}/{entry['name']}"
        occurrence = entry.get("occurrence_public_id")
        link = (
            f"{base}/findings/{occurrence}"
            if occurrence
            else base + repository_path(entry["host"], entry["owner"], entry["name"])
        )
        where = entry.get("file_path") or "unknown path"
        if entry.get("repository_id") is not None:
            feed.tags.append(repository_tag(entry["repository_id"]))
        feed.entries.append(
            Entry(
                id=tag("instance", entry["public_id"]),
                title=f"{entry['title']} in {repo}",
                link=link,
                updated=entry["updated_at"],
                category=entry.get("severity"),
                summary=f"{entry['status']} {entry.get('severity') or ''} finding in {entry['host']}/{repo} at {where}",
            )
        )
    return feed


async def repository_reports_feed(host: str, owner: str, name: str) -> Feed | None:
    """New reports of one repository that anonymous visitors may see; None for unknown or quarantined ones."""
    repository = await get_public_repository(host, owner, name)
    if repository is None:
        return None
    base = seo_settings().base_url
    page = base + repository_path(repository["host"], repository["owner"], repository["name"])
    slug = f"{repository['host']}/{repository['owner']}/{repository['name']}"
    feed = Feed(
        id=tag("feed", f"reports:{repository['id']}"),
        title=f"Tarakan reports: {slug}",
        subtitle=f"New public reports on {slug}, and its maintainers' statements",
        self_url=f"{page}/reports.atom",
        alternate_url=page,
        fallback_updated=repository["updated_at"],
        tags=[repository_tag(repository["id"])],
    )
    for report in await list_public_reports(repository["id"], limit=FEED_ENTRIES):
        review = REVIEW_STATUS_WORDS[report["review_status"]]
        if report["visibility"] == "public":
            detail = f"{_plural(int(report['findings_count']), 'finding')}, {review}"
        else:  # public_summary: the header only (docs/domain.md §1.2)
            detail = f"summary only (findings withheld by moderation), {review}"
        by = report["model"] or report["provenance"]
        feed.entries.append(
            Entry(
                id=tag("report", report["id"]),
                title=f"Report {report['id']} on {slug} at {report['commit_sha'][:12]}",
                link=f"{page}#report-{report['id']}",
                updated=report["updated_at"],
                published=report["inserted_at"],
                category=report["review_kind"],
                summary=f"{report['provenance']} {report['review_kind'].replace('_', ' ')} ({by}): {detail}",
            )
        )
    # the maintainers' current statements (a hidden one, or one on a finding taken down, is gone at once)
    for row in await repository_statements(repository["id"], limit=FEED_ENTRIES, newest_first=True):
        statement = row.statement
        said = statement.status.replace("_", " ")
        if statement.justification:
            said += f" ({statement.justification.replace('_', ' ')})"
        details = [t for t in (statement.impact_statement, statement.action_statement) if t]
        if statement.fixed_in:
            details.append(f"fixed in commit {statement.fixed_in}")
        feed.entries.append(
            Entry(
                id=tag("statement", statement.id),
                title=f"Maintainers' statement on {row.title}: {said}",
                link=f"{base}{finding_path(row.occurrence)}#maintainer-statement",
                updated=statement.at,
                category="maintainer-statement",
                summary=f"The maintainers of {slug} say {said}" + (": " + "; ".join(details) if details else ""),
            )
        )
    return feed
