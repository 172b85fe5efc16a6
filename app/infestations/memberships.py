"""The membership table read both ways: a pattern's repositories (the graph's satellites) and a repository's
patterns, over the rollup tables, the legacy aggregate when the flag is off (docs/domain.md §5.7)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, bindparam, select, true

from app.infestations.legacy import list_pattern_repos_legacy, list_repository_infestations_legacy
from app.infestations.queries import (
    ALL_TIME_COLUMNS,
    PAGE_MAX,
    REPRESENTATIVE_COLUMNS,
    guarded_map,
    newest_first,
    newest_first_pages,
    parse_pattern_key,
    pattern_repos,
    patterns,
    published_repositories,
    repositories,
    sample_visible,
)
from app.infestations.rows import clamp, membership_entry, newest_first_page, with_repository_share
from app.kernel import db, flags
from app.kernel.paging import Page
from app.kernel.sql import compiled
from app.record.public import visible_occurrence


def _pattern_repos() -> Select[Any]:
    query = (
        select(
            pattern_repos.c.repository_id.label("id"),
            pattern_repos.c.repository_id,
            published_repositories.c.opaque_id.label("repository_uuid"),
            repositories.c.host,
            repositories.c.owner,
            repositories.c.name,
            pattern_repos.c.primary_status.label("status"),
            pattern_repos.c.severity,
            pattern_repos.c.title,
            pattern_repos.c.instance_count,
            pattern_repos.c.open_count,
            pattern_repos.c.sample_occurrence_public_id.label("occurrence_public_id"),
            pattern_repos.c.last_seen_at.label("updated_at"),
        )
        .select_from(
            pattern_repos.join(repositories, repositories.c.id == pattern_repos.c.repository_id).outerjoin(
                published_repositories, published_repositories.c.repository_id == pattern_repos.c.repository_id
            )
        )
        .where(
            pattern_repos.c.pattern_key == bindparam("key"),
            visible_occurrence(pattern_repos.c.sample_occurrence_public_id),
        )
    )
    return newest_first(query, pattern_repos.c.last_seen_at, pattern_repos.c.repository_id)


_REPOS = newest_first_pages(_pattern_repos(), pattern_repos.c.last_seen_at, pattern_repos.c.repository_id)


async def list_pattern_repos_page(
    pattern_key: str, *, limit: int = 64, cursor: str | None = None
) -> Page[dict[str, Any]]:
    """Repositories affected by a pattern, most recently seen first (default 64 = the graph's satellites,
    max 100), keyset on `(last_seen_at DESC, repository_id DESC)`. A membership whose repository or sample report
    was taken down is skipped at once (the read-time guard)."""
    limit = clamp(limit, 1, PAGE_MAX)
    if not await flags.read_from_rollup():
        return await list_pattern_repos_legacy(parse_pattern_key(pattern_key), limit=limit, cursor=cursor)
    return await newest_first_page(
        _REPOS,
        parse_pattern_key(pattern_key),
        limit=limit,
        cursor=cursor,
        entry=membership_entry,
    )


def _repository_infestations() -> Select[Any]:
    # a visible membership (its repository listed, its sample's report public) implies a visible pattern
    sv = sample_visible(pattern_repos)
    return (
        select(
            patterns.c.pattern_key,
            *REPRESENTATIVE_COLUMNS,
            *ALL_TIME_COLUMNS,
            sv.c.sample_visible,
            pattern_repos.c.instance_count.label("repository_instance_count"),
            pattern_repos.c.open_count.label("repository_open_count"),
            pattern_repos.c.primary_status.label("repository_status"),
            pattern_repos.c.sample_occurrence_public_id.label("repository_occurrence_public_id"),
        )
        .select_from(
            pattern_repos.join(patterns, patterns.c.pattern_key == pattern_repos.c.pattern_key).join(sv, true())
        )
        .where(
            pattern_repos.c.repository_id == bindparam("repository_id"),
            patterns.c.repo_count >= bindparam("min_repos"),
            visible_occurrence(pattern_repos.c.sample_occurrence_public_id),
        )
        .order_by(patterns.c.repo_count.desc(), patterns.c.pattern_key.asc())
        .limit(bindparam("limit"))
    )


_REPOSITORY_INFESTATIONS = compiled(_repository_infestations())


async def list_repository_infestations(
    repository_id: int, *, limit: int = 50, min_repos: int = 1
) -> list[dict[str, Any]]:
    """Patterns one repository takes part in, widest spread first (max 100; `min_repos=2` keeps only patterns
    shared with other repositories). Each item is the pattern's all-time infestation map plus this repository's
    share: `repository_instance_count`, `repository_open_count`, `repository_status` and
    `repository_occurrence_public_id`."""
    limit, min_repos = clamp(limit, 1, PAGE_MAX), clamp(min_repos, 1, 50)
    if not await flags.read_from_rollup():
        return await list_repository_infestations_legacy(int(repository_id), limit=limit, min_repos=min_repos)
    params = {"repository_id": int(repository_id), "limit": limit, "min_repos": min_repos}
    async with db.reader() as read:
        rows = await read.maps(_REPOSITORY_INFESTATIONS, params)
    items = []
    for row in rows:
        items.append(with_repository_share(guarded_map(row), row, prefix="repository_"))
    return items
