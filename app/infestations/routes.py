"""The atlas's public pages, the ranked index and a pattern's show page, with their JSON twins; plain GET forms and
links, htmx fragments on `HX-Request` (docs/domain.md §6). Each is a `page_route`: parse the address once, read,
render (docs/architecture.md "A request from route to SQL")."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from app.infestations import memberships, queries
from app.infestations.constellation import Constellation, constellation_layout
from app.infestations.hub import SATELLITE_CAP, hub_layout
from app.infestations.queries import DatedList
from app.infestations.rows import (
    BY_UPDATED_AT,
    INDEX_LIMIT,
    MIN_REPOS_CHOICES,
    STATUS_CHOICES,
    Infestation,
    InfestationFilters,
    as_answer,
    clamp,
    instance_entry,
    membership_entry,
)
from app.infestations.types import InfestationList, InfestationShow, affected_repository_page, instance_page
from app.kernel import db
from app.kernel.answers import iso
from app.kernel.errors import BadRequest, NotFound
from app.kernel.paging import InvalidCursor, Page, Pages, cursor_params, keyset_page
from app.kernel.shared_cache import ATLAS_TAG, pattern_tag, repository_tag
from app.kernel.sql import WINDOW_DAYS
from app.kernel.templating import Drawn, rows_key
from app.kernel.urls import finding_path, infestation_path, repo_path, twin_path
from app.kernel.web import View, json_twin, page
from app.record.rendered import ATLAS, page_route

CONSTELLATION_TOP = 30  # the picture stays light; the table below carries all rows
LEDGER_PAGE = 50
# query strings up to this long keep their parsed filters (a bounded memo: a hostile long query is parsed each time)
_MEMO_QUERY_BYTES = 256


def _integer(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


def parse_filters(params: Mapping[str, str], *, rollup: bool = True) -> InfestationFilters:
    """docs/domain.md §5.7 and §4.1: `days` is any integer, clamped to 1..365 (the list reads the smallest window
    bucket covering it, guarded by the real days); `min_repos` and `limit` are clamped the same way; a value that
    is not an integer, or an unknown status, quietly becomes the default (never a 4xx or 500: a stale bookmark or
    a hand-edited URL still shows the atlas)."""
    return InfestationFilters.of(
        days=_integer(params.get("days"), 30),
        min_repos=_integer(params.get("min_repos"), 2),
        status=params.get("status"),
        limit=_integer(params.get("limit"), INDEX_LIMIT),
        rollup=rollup,
    )


@functools.lru_cache(maxsize=1024)
def _filters_of(query_string: bytes, rollup: bool) -> InfestationFilters:
    return parse_filters(QueryParams(query_string), rollup=rollup)


def parse_index(request: Request, rollup: bool) -> InfestationFilters:
    """The index's filters, clamped: `days=9999` is the `days=365` page (and its kept copy)."""
    query: bytes = request.scope["query_string"]
    if len(query) <= _MEMO_QUERY_BYTES:
        return _filters_of(query, rollup)
    return parse_filters(request.query_params, rollup=rollup)


def atlas_tags(items: Iterable[Mapping[str, Any]]) -> list[str]:
    """The shared cache's tags of an atlas list: `atlas` and each pattern it shows."""
    return [ATLAS_TAG, *(pattern_tag(item["pattern_key"]) for item in items)]


async def read_index(view: View[InfestationFilters]) -> DatedList:
    return await queries.list_infestations_dated(view.query, rollup=view.rollup)


# The picture is a pure function of the rows it draws (app.infestations.svg: the same rows draw the same picture):
# the pages of one list (a status, a window) and the renders after a version move that left the top rows as they were
# (a refresh elsewhere, a report on a pattern below them) draw the one layout kept for those rows. Keyed by every
# field the layout reads (counts are ints: `infestation_map`), so different rows never share a picture; a handful
# kept, dropped all at once when full.
_LAYOUT_FIELDS = (
    "pattern_key",
    "title",
    "severity",
    "repo_count",
    "instance_count",
    "open_count",
    "verified_count",
    "fixed_count",
    "disputed_count",
)
_LAYOUTS_KEPT = 16
_layouts: dict[tuple[tuple[Any, ...], ...], Constellation] = {}


def index_constellation(items: list[dict[str, Any]]) -> Constellation:
    """`constellation_layout(items, limit=CONSTELLATION_TOP)`, drawn once per distinct top rows."""
    top = items[:CONSTELLATION_TOP]
    key = tuple(tuple(item.get(name) for name in _LAYOUT_FIELDS) for item in top)
    layout = _layouts.get(key)
    if layout is None:
        layout = constellation_layout(top, limit=CONSTELLATION_TOP)
        if len(_layouts) >= _LAYOUTS_KEPT:
            _layouts.clear()
        _layouts[key] = layout
    return layout


# The ranked results (the constellation and the table) are a function of the filters and the rows alone: a version
# that moved without changing them (a report elsewhere, a statement) reuses the markup drawn for them, as the
# home's fragment does (app.site.home_infestations).
_results = Drawn("infestations/_results.html")


def drawn_results(filters: InfestationFilters, items: list[dict[str, Any]]) -> Markup:
    """`infestations/_results.html` for these filters and rows, drawn once per distinct pair."""
    return _results(
        (filters, rows_key(items)),
        lambda: {"filters": filters, "items": items, "constellation": index_constellation(items)},
    )


def render_index(view: View[InfestationFilters], dated: DatedList) -> Response:
    filters, items = view.query, dated.items
    tags = atlas_tags(items)
    if view.as_json:
        # when the counts were computed, beside the items (docs/domain.md §5.7: counts may lag a takedown)
        listed = [as_answer(Infestation, item) for item in items]
        return json_twin(
            InfestationList(items=listed, refreshed_at=iso(dated.refreshed_at), filters=filters), tags=tags
        )
    if view.fragment:
        context = {"filters": filters, "items": items, "constellation": index_constellation(items)}
    else:
        context = {"filters": filters, "results": drawn_results(filters, items)}
    context |= {
        "windows": WINDOW_DAYS,
        "min_repos_choices": MIN_REPOS_CHOICES,
        "status_choices": STATUS_CHOICES,
    }
    json_url = twin_path(f"/infestations?{filters.query_string()}")
    name = "infestations/_results.html" if view.fragment else "infestations/index.html"
    return page(view.request, name, context, json_url=json_url, vary_hx=True, tags=tags)


@dataclass(frozen=True, slots=True)
class LedgerQuery:
    """A show or ledger page's address: the pattern key as written (checked by the read: 404) and its cursors
    (checked by the read: 400)."""

    pattern_key: str
    cursor: str | None
    repos_cursor: str | None

    def paging(self) -> str:
        """The paging parameters it was asked for, as a query string."""
        return urlencode({k: v for k, v in (("cursor", self.cursor), ("repos_cursor", self.repos_cursor)) if v})


def parse_ledger(request: Request, rollup: bool) -> LedgerQuery:
    q = request.query_params
    return LedgerQuery(request.path_params["pattern_key"], q.get("cursor") or None, q.get("repos_cursor") or None)


@dataclass(frozen=True, slots=True)
class ShowData:
    """Everything a show or ledger page and its twin need."""

    infestation: dict[str, Any]
    refreshed_at: datetime | None
    instances: Page[dict[str, Any]]
    repositories: Page[dict[str, Any]]
    cursor: str | None

    def context(self) -> dict[str, Any]:
        """What the page's templates read; the ledger's rows with their links made here (a template's call of a
        path function costs Jinja's call machinery each row)."""
        rows = [
            row
            | {
                "repository_path": repo_path(row["host"], row["owner"], row["name"]),
                "finding_path": finding_path(row["occurrence_public_id"]) if row["occurrence_public_id"] else None,
            }
            for row in self.instances["entries"]
        ]
        return {
            "infestation": self.infestation,
            "refreshed_at": self.refreshed_at,
            "instances": {**self.instances, "entries": rows},
            "repositories": self.repositories,
            "cursor": self.cursor,
        }

    def tags(self) -> list[str]:
        """`atlas`, its pattern and the repositories it names."""
        rows = [*self.instances["entries"], *self.repositories["entries"]]
        repositories = [repository_tag(row["repository_id"]) for row in rows if row.get("repository_id") is not None]
        return [ATLAS_TAG, pattern_tag(self.infestation["pattern_key"]), *repositories]


def _not_found() -> NotFound:
    return NotFound({"pattern_key": ["not found"]}, message="No infestation is recorded under this pattern key.")


async def _infestation(raw_key: str, rollup: bool) -> tuple[dict[str, Any], datetime | None]:
    infestation, refreshed_at = await queries.get_infestation_dated(raw_key, rollup=rollup)
    if infestation is None or infestation["repo_count"] < 1:
        raise _not_found()
    return infestation, refreshed_at


@contextmanager
def _bad_cursor_is_400() -> Iterator[None]:
    try:
        yield
    except InvalidCursor as exc:
        raise BadRequest(
            exc.errors, title="Bad cursor", message="The cursor in this address is not one this site issued."
        ) from exc


async def _show_data(view: View[LedgerQuery], *, with_repositories: bool) -> ShowData:
    """404 unknown key, 400 bad cursor.

    The reads run at once, each on its own read session (`queries` opens one per call) and each under the
    read-time guard: the page waits for the slowest read instead of their sum. An unknown key still answers 404
    before a bad cursor's 400, as when they ran one after the other."""
    asked, rollup = view.query, view.rollup
    key = queries.parse_pattern_key(asked.pattern_key)
    if key is None:
        await _infestation(asked.pattern_key, rollup)  # the one 404 of an unknown key
    assert key is not None
    if rollup:
        return await _show_rollup(key, asked, with_repositories=with_repositories)
    empty: Page[dict[str, Any]] = {"entries": [], "next_cursor": None}

    async def repositories_page() -> Page[dict[str, Any]]:
        if not with_repositories:
            return empty
        return await memberships.list_pattern_repos_page(key, limit=SATELLITE_CAP, cursor=asked.repos_cursor)

    found, instances, repositories = await asyncio.gather(
        _infestation(key, rollup),
        queries.list_instances_page(key, limit=LEDGER_PAGE, cursor=asked.cursor, rollup=rollup),
        repositories_page(),
        return_exceptions=True,
    )
    for outcome in (found, instances, repositories):  # the first failure in the order the reads used to run
        if isinstance(outcome, BaseException):
            with _bad_cursor_is_400():
                raise outcome
    assert not isinstance(found, BaseException)
    assert not isinstance(instances, BaseException) and not isinstance(repositories, BaseException)
    infestation, refreshed_at = found
    return ShowData(infestation, refreshed_at, instances, repositories, asked.cursor)


def _paging(cursor: str | None) -> dict[str, Any] | InvalidCursor:
    try:
        return cursor_params(cursor)
    except InvalidCursor as exc:
        return exc


async def _newest_first(
    read: db.Reader,
    statements: Pages,
    key: str,
    params: dict[str, Any],
    limit: int,
    entry: Callable[[Mapping[Any, Any]], dict[str, Any]],
) -> Page[dict[str, Any]]:
    """`rows.newest_first_page`'s page, read on `read`."""
    params.update(key=key, fetch=limit + 1)
    rows = await read.maps(statements["cursor_at" in params], params)
    return keyset_page([entry(row) for row in rows], limit, BY_UPDATED_AT)


async def _show_rollup(key: str, asked: LedgerQuery, *, with_repositories: bool) -> ShowData:
    """The rollup path's reads of `_show_data` on one reader, one after the other: a session costs more of
    this process's CPU than a statement, and the page's three statements are each an index probe. The answers and
    their order of failure are `_show_data`'s: an unknown key's 404, then a bad cursor's 400 (ledger, then
    repositories)."""
    ledger, satellites = _paging(asked.cursor), _paging(asked.repos_cursor)
    async with db.reader() as read:
        found = await read.maps(queries.PATTERN_SQL, {"key": key})
        row = found[0] if found else None
        infestation = None if row is None else queries.guarded_map(row)
        if row is None or infestation is None or infestation["repo_count"] < 1:
            raise _not_found()
        for paging in (ledger, satellites if with_repositories else {}):
            if isinstance(paging, InvalidCursor):
                with _bad_cursor_is_400():
                    raise paging
        assert not isinstance(ledger, InvalidCursor)
        limit = clamp(LEDGER_PAGE, 1, queries.PAGE_MAX)
        instances = await _newest_first(read, queries.INSTANCE_PAGES, key, ledger, limit, instance_entry)
        repositories: Page[dict[str, Any]] = {"entries": [], "next_cursor": None}
        if with_repositories:
            assert not isinstance(satellites, InvalidCursor)
            limit = clamp(SATELLITE_CAP, 1, queries.PAGE_MAX)
            repositories = await _newest_first(read, memberships._REPOS, key, satellites, limit, membership_entry)
    return ShowData(infestation, row["refreshed_at"], instances, repositories, asked.cursor)


async def read_show(view: View[LedgerQuery]) -> ShowData:
    return await _show_data(view, with_repositories=True)


def render_show(view: View[LedgerQuery], data: ShowData) -> Response:
    if view.as_json:
        show = InfestationShow(
            infestation=as_answer(Infestation, data.infestation),
            refreshed_at=iso(data.refreshed_at),
            repositories=affected_repository_page(data.repositories),
            instances=instance_page(data.instances),
        )
        return json_twin(show, tags=data.tags())
    return _show_page(view, data, path=infestation_path(data.infestation["pattern_key"]))


def _twin_of(view: View[LedgerQuery], path: str) -> str:
    """The JSON of exactly this page: its canonical path with `.json` and the paging parameters it was asked for
    (a twin without the cursor would hand a client page 1 again, forever)."""
    query = view.query.paging()
    return twin_path(f"{path}?{query}" if query else path)


_affected = Drawn("infestations/_affected.html", kept=64)


def drawn_affected(infestation: Mapping[str, Any], entries: list[dict[str, Any]]) -> Markup:
    """The show page's "Affected repositories" (the hub graph and its table) for these satellites, drawn once per
    distinct input: every ledger page of a pattern (`?cursor=`, what a crawler walks) shows the same section."""
    repo_count, title = infestation.get("repo_count"), infestation.get("title")
    return _affected(
        (repo_count, title, rows_key(entries)),
        lambda: {"graph": hub_layout(infestation, entries, cap=SATELLITE_CAP), "repo_count": repo_count},
    )


def _show_page(view: View[LedgerQuery], data: ShowData, *, path: str) -> Response:
    context = {**data.context(), "affected": drawn_affected(data.infestation, data.repositories["entries"])}
    json_url = _twin_of(view, path)
    return page(view.request, "infestations/show.html", context, json_url=json_url, vary_hx=True, tags=data.tags())


async def read_ledger(view: View[LedgerQuery]) -> ShowData:
    return await _show_data(view, with_repositories=not (view.as_json or view.fragment))


def render_ledger(view: View[LedgerQuery], data: ShowData) -> Response:
    """The ledger from `?cursor=`: the page of rows as JSON for the twin, rows plus the next control for htmx
    (appended in place), the whole show page (starting at the cursor) for everyone else."""
    if view.as_json:
        return json_twin(instance_page(data.instances), tags=data.tags())
    path = f"{infestation_path(data.infestation['pattern_key'])}/instances"
    if not view.fragment:
        return _show_page(view, data, path=path)
    name = "infestations/_ledger_fragment.html"
    return page(view.request, name, data.context(), json_url=_twin_of(view, path), vary_hx=True, tags=data.tags())


routes: list[BaseRoute] = [
    page_route(
        "/infestations{format:format}",
        parse=parse_index,
        read=read_index,
        render=render_index,
        name="infestations",
        scope=ATLAS,
    ),
    page_route(
        "/infestations/{pattern_key}/instances{format:format}",
        parse=parse_ledger,
        read=read_ledger,
        render=render_ledger,
        name="infestation_instances",
        scope=ATLAS,
    ),
    page_route(
        "/infestations/{pattern_key:stem}{format:format}",
        parse=parse_ledger,
        read=read_show,
        render=render_show,
        name="infestation",
        scope=ATLAS,
    ),
]
