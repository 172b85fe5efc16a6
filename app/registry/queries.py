"""Public reads of the registry: one repository by its coordinates, and search over listed repositories."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.kernel import db
from app.kernel.cache import TakedownKeyedCache
from app.kernel.paging import clamp_limit
from app.kernel.public import LISTED_REPOSITORY

SEARCH_DEFAULT = 20
SEARCH_MAX = 50
QUERY_MAX_LENGTH = 100
# The substring pass cannot use an index (no trigram index in the schema): bound it in time, and fall back to
# the indexed prefix matches alone when it runs out, so a search never stalls a page at scale.
SUBSTRING_TIMEOUT_MS = 250
# Searches are cached single-flight by (query, limit) for a few seconds, and dropped at the next request after any
# audited takedown (docs/security.md "Limits"); one entry for every viewer, since a search lists only listed
# repositories whoever asks. Read through the module so tests can change it.
SEARCH_CACHE_SECONDS = 5.0
SEARCH_CACHE_SIZE = 512
search_cache: TakedownKeyedCache[list[dict[str, Any]]] = TakedownKeyedCache(
    lambda: SEARCH_CACHE_SECONDS, maxsize=SEARCH_CACHE_SIZE
)

_REPOSITORY_COLUMNS = """
r.id, r.host, r.owner, r.name, r.canonical_url, r.status, r.scan_count, r.open_findings_count,
r.verified_findings_count, r.last_scanned_at, r.description, r.primary_language, r.stars_count, r.forks_count,
r.archived, r.participation_mode, r.listing_status, r.inserted_at
"""

_REPOSITORY = f"""
SELECT {_REPOSITORY_COLUMNS} FROM repositories r
WHERE r.host = :host AND r.owner = :owner AND r.name = :name
"""

_SEARCH_NAME_PREFIX = f"""
SELECT {_REPOSITORY_COLUMNS} FROM repositories r
WHERE {LISTED_REPOSITORY} AND r.name LIKE :prefix ESCAPE '\\'
ORDER BY r.inserted_at DESC, r.id DESC
LIMIT :limit
"""

_SEARCH_OTHERS = f"""
SELECT {_REPOSITORY_COLUMNS} FROM repositories r
WHERE {LISTED_REPOSITORY}
  AND r.name NOT LIKE :prefix ESCAPE '\\'
  AND (r.owner LIKE :inside ESCAPE '\\' OR r.name LIKE :inside ESCAPE '\\'
       OR (r.owner || '/' || r.name) LIKE :inside ESCAPE '\\')
ORDER BY r.inserted_at DESC, r.id DESC
LIMIT :limit
"""


def escape_like(value: str) -> str:
    """Make user input literal inside a LIKE pattern (ESCAPE '\\')."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def normalize_query(raw: str | None) -> str:
    """Owners and names are stored lowercased and trimmed; so is the query."""
    return " ".join((raw or "").split()).lower()[:QUERY_MAX_LENGTH]


async def get_repository(host: str, owner: str, name: str) -> dict[str, Any] | None:
    """A repository by its coordinates, whatever its listing status (the caller applies visibility)."""
    async with db.read_session() as session:
        row = (
            (await session.execute(text(_REPOSITORY), {"host": host, "owner": owner, "name": name})).mappings().first()
        )
    return dict(row) if row is not None else None


async def search_repositories(raw_query: str | None, *, limit: int = SEARCH_DEFAULT) -> list[dict[str, Any]]:
    """Listed repositories matching `owner`, `name` or `owner/name`: name-prefix matches first, then the
    others, each newest first; at most `limit` (max 50). An empty query returns nothing. The same for every
    viewer (no privileged view lists more), so every answer goes through the shared `search_cache`."""
    query = normalize_query(raw_query)
    limit = clamp_limit(limit, SEARCH_MAX)
    if not query:
        return []
    found = await search_cache.get((query, limit), lambda: _search(query, limit))
    return [dict(r) for r in found]  # callers get their own rows; the cached ones stay as loaded


async def _search(query: str, limit: int) -> list[dict[str, Any]]:
    literal = escape_like(query)
    params = {"prefix": literal + "%", "inside": "%" + literal + "%", "limit": limit}
    async with db.read_session() as session:
        found = [dict(r) for r in (await session.execute(text(_SEARCH_NAME_PREFIX), params)).mappings()]
        if len(found) < limit:
            params["limit"] = limit - len(found)
            try:
                async with session.begin_nested():
                    await session.execute(text(f"SET LOCAL statement_timeout = {SUBSTRING_TIMEOUT_MS}"))
                    found += [dict(r) for r in (await session.execute(text(_SEARCH_OTHERS), params)).mappings()]
            except DBAPIError:
                pass  # timed out: the prefix matches alone are still a useful answer
    return found
