"""Public reads of the registry: one repository by its coordinates, and search over listed repositories."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TypedDict, cast

from sqlalchemy import RowMapping, bindparam, or_, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import BindParameter

from app.kernel import db
from app.kernel.paging import clamp_limit
from app.kernel.sql import compiled
from app.record.public import listed_repository
from app.record.takedowns import TakedownKeyedCache
from app.registry.models import Repository

SEARCH_DEFAULT = 20
SEARCH_MAX = 50
QUERY_MAX_LENGTH = 100
# The substring pass cannot use an index (no trigram index in the schema): bound it in time, and fall back to
# the indexed prefix matches alone when it runs out, so a search never stalls a page at scale.
SUBSTRING_TIMEOUT_MS = 250
# the anonymous search cache (docs/security.md "Limits"); read through the module so tests can change it
SEARCH_CACHE_SECONDS = 5.0
SEARCH_CACHE_SIZE = 512


class RegisteredRepository(TypedDict):
    """A repository as the public reads return it: its keys are the columns they select (`_REPOSITORY_COLUMNS`), in
    this order. A TypedDict, not a struct: the twins' `app.registry.types.public_repository` reads it by key."""

    id: int
    host: str
    owner: str
    name: str
    canonical_url: str
    status: str
    scan_count: int
    open_findings_count: int
    verified_findings_count: int
    last_scanned_at: datetime | None
    description: str | None
    primary_language: str | None
    stars_count: int
    forks_count: int
    archived: bool
    participation_mode: str
    listing_status: str
    inserted_at: datetime
    default_branch: str | None
    metadata_state: str


search_cache: TakedownKeyedCache[list[RegisteredRepository]] = TakedownKeyedCache(
    lambda: SEARCH_CACHE_SECONDS, maxsize=SEARCH_CACHE_SIZE
)

_repositories = Repository.__table__.alias("r")
_REPOSITORY_COLUMNS = select(*(_repositories.c[name] for name in RegisteredRepository.__annotations__))
_REPOSITORY = compiled(
    _REPOSITORY_COLUMNS.where(
        _repositories.c.host == bindparam("host"),
        _repositories.c.owner == bindparam("owner"),
        _repositories.c.name == bindparam("name"),
    )
)

# `:prefix` and `:inside` are LIKE patterns of escaped user input (`escape_like`)
_ESCAPE = "\\"
_NAME_PREFIX = _repositories.c.name.like(bindparam("prefix"), escape=_ESCAPE)
_INSIDE: BindParameter[str] = bindparam("inside")
_LISTED_NEWEST_FIRST = _REPOSITORY_COLUMNS.where(listed_repository(_repositories)).order_by(
    _repositories.c.inserted_at.desc(), _repositories.c.id.desc()
)
_SEARCH_NAME_PREFIX = compiled(_LISTED_NEWEST_FIRST.where(_NAME_PREFIX).limit(bindparam("limit")))
_SEARCH_OTHERS = compiled(
    _LISTED_NEWEST_FIRST.where(
        ~_NAME_PREFIX,
        or_(
            _repositories.c.owner.like(_INSIDE, escape=_ESCAPE),
            _repositories.c.name.like(_INSIDE, escape=_ESCAPE),
            (_repositories.c.owner + "/" + _repositories.c.name).like(_INSIDE, escape=_ESCAPE),
        ),
    ).limit(bindparam("limit"))
)
# the substring pass's own statement timeout (`SET LOCAL`, with a parameter)
_SUBSTRING_TIMEOUT = text("SELECT set_config('statement_timeout', :timeout, true)")


def _registered(rows: Iterable[RowMapping]) -> list[RegisteredRepository]:
    return [cast(RegisteredRepository, dict(row)) for row in rows]  # the columns of `_REPOSITORY_COLUMNS`


def escape_like(value: str) -> str:
    """Make user input literal inside a LIKE pattern (ESCAPE '\\')."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def normalize_query(raw: str | None) -> str:
    """Owners and names are stored lowercased and trimmed; so is the query."""
    return " ".join((raw or "").split()).lower()[:QUERY_MAX_LENGTH]


async def get_repository(host: str, owner: str, name: str) -> RegisteredRepository | None:
    """A repository by its coordinates, whatever its listing status (the caller applies visibility)."""
    async with db.reader() as read:
        found = await read.maps(_REPOSITORY, {"host": host, "owner": owner, "name": name})
    return cast(RegisteredRepository, found[0]) if found else None


async def search_repositories(raw_query: str | None, *, limit: int = SEARCH_DEFAULT) -> list[RegisteredRepository]:
    """Listed repositories matching `owner`, `name` or `owner/name`: name-prefix matches first, then the
    others, each newest first; at most `limit` (max 50). An empty query returns nothing. The same for every
    viewer (no privileged view lists more), so every answer goes through the shared `search_cache`."""
    query = normalize_query(raw_query)
    limit = clamp_limit(limit, SEARCH_MAX)
    if not query:
        return []
    found = await search_cache.get((query, limit), lambda: _search(query, limit))
    return [r.copy() for r in found]  # callers get their own rows; the cached ones stay as loaded


async def _search(query: str, limit: int) -> list[RegisteredRepository]:
    literal = escape_like(query)
    params = {"prefix": literal + "%", "inside": "%" + literal + "%", "limit": limit}
    # a transaction: the substring pass sets its own timeout with `SET LOCAL` in a savepoint
    async with db.read_session(transaction=True) as session:
        found = _registered((await session.execute(_SEARCH_NAME_PREFIX, params)).mappings())
        if len(found) < limit:
            params["limit"] = limit - len(found)
            try:
                async with session.begin_nested():
                    await session.execute(_SUBSTRING_TIMEOUT, {"timeout": str(SUBSTRING_TIMEOUT_MS)})
                    found += _registered((await session.execute(_SEARCH_OTHERS, params)).mappings())
            except DBAPIError:
                pass  # timed out: the prefix matches alone are still a useful answer
    return found
