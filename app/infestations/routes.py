"""The atlas's public pages, the ranked index and a pattern's show page, with their JSON twins; plain GET forms and
links, htmx fragments on `HX-Request` (docs/domain.md §6)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.infestations import memberships, queries
from app.infestations.constellation import constellation_layout
from app.infestations.hub import SATELLITE_CAP, hub_layout
from app.infestations.rows import MIN_REPOS_CHOICES, ListOptions, list_options
from app.infestations.types import (
    STATUS_CHOICES,
    InfestationFilters,
    InfestationList,
    InfestationShow,
    affected_repository_page,
    infestation,
    instance_page,
)
from app.kernel.answers import iso
from app.kernel.errors import BadRequest, NotFound
from app.kernel.paging import InvalidCursor, Page
from app.kernel.shared_cache import ATLAS_TAG, pattern_tag, repository_tag
from app.kernel.sql import WINDOW_DAYS
from app.kernel.urls import infestation_path, twin_path
from app.kernel.web import is_fragment_request, json_twin, page, wants_json
from app.record.rendered import rendered_once

INDEX_LIMIT = 50
CONSTELLATION_TOP = 30  # the picture stays light; the table below carries all rows
LEDGER_PAGE = 50


@dataclass(frozen=True)
class Filters:
    days: int = 30
    min_repos: int = 2
    status: str = "all"
    limit: int = INDEX_LIMIT

    def options(self) -> ListOptions:
        return ListOptions(
            days=self.days,
            min_repos=self.min_repos,
            status=None if self.status == "all" else self.status,
            limit=self.limit,
        )

    def query_string(self) -> str:
        query: dict[str, object] = {"days": self.days, "min_repos": self.min_repos, "status": self.status}
        if self.limit != INDEX_LIMIT:
            query["limit"] = self.limit
        return urlencode(query)

    def applied(self, counts_window_days: int) -> InfestationFilters:
        """What the twin says it answered: the clamped filters and the window whose counts it read (§5.7: the
        smallest bucket covering `days` on the rollups, with or without a status filter; the real days on the
        legacy path)."""
        return InfestationFilters(
            days=self.days,
            min_repos=self.min_repos,
            status=self.status,
            limit=self.limit,
            counts_window_days=counts_window_days,
        )


def _integer(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


def parse_filters(params: Mapping[str, str]) -> Filters:
    """docs/domain.md §5.7 and §4.1: `days` is any integer, clamped to 1..365 (the list reads the smallest window
    bucket covering it, guarded by the real days); `min_repos` and `limit` are clamped the same way; a value that
    is not an integer, or an unknown status, quietly becomes the default (never a 4xx or 500: a stale bookmark or
    a hand-edited URL still shows the atlas)."""
    options = list_options(
        days=_integer(params.get("days"), 30),
        min_repos=_integer(params.get("min_repos"), 2),
        status=params.get("status"),
        limit=_integer(params.get("limit"), INDEX_LIMIT),
    )
    return Filters(options.days, options.min_repos, options.status or "all", options.limit)


def atlas_tags(items: Iterable[Mapping[str, Any]]) -> list[str]:
    """The shared cache's tags of an atlas list: `atlas` and each pattern it shows."""
    return [ATLAS_TAG, *(pattern_tag(item["pattern_key"]) for item in items)]


def _show_tags(data: Mapping[str, Any]) -> list[str]:
    """A show or ledger page: `atlas`, its pattern and the repositories it names."""
    rows = [*data["instances"]["entries"], *data["repositories"]["entries"]]
    return [ATLAS_TAG, pattern_tag(data["infestation"]["pattern_key"]), *_repository_tags(rows)]


def _repository_tags(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    return [repository_tag(row["repository_id"]) for row in rows if row.get("repository_id") is not None]


# query strings up to this long keep their parsed filters (a bounded memo: a hostile long query is parsed each time)
_MEMO_QUERY_BYTES = 256


@functools.lru_cache(maxsize=1024)
def _filters_of(query_string: bytes) -> Filters:
    return parse_filters(QueryParams(query_string))


def _index_key(request: Request) -> Hashable:
    query: bytes = request.scope["query_string"]
    filters = _filters_of(query) if len(query) <= _MEMO_QUERY_BYTES else parse_filters(request.query_params)
    return (request.scope["path"], filters)  # clamped: `days=9999` is the `days=365` page


def _paged_key(request: Request) -> Hashable:
    q = request.query_params
    return (request.scope["path"], q.get("cursor") or None, q.get("repos_cursor") or None)


@rendered_once(_index_key)
async def index(request: Request) -> Response:
    filters = parse_filters(request.query_params)
    items, refreshed_at, counts_window_days = await queries.list_infestations_dated(filters.options())
    tags = atlas_tags(items)
    if wants_json(request):
        # when the counts were computed, beside the items (docs/domain.md §5.7: counts may lag a takedown)
        listed = [infestation(item) for item in items]
        applied = filters.applied(counts_window_days)
        return json_twin(InfestationList(items=listed, refreshed_at=iso(refreshed_at), filters=applied), tags=tags)
    context = {
        "filters": filters,
        "items": items,
        "constellation": constellation_layout(items, limit=CONSTELLATION_TOP),
        "windows": WINDOW_DAYS,
        "min_repos_choices": MIN_REPOS_CHOICES,
        "status_choices": STATUS_CHOICES,
    }
    json_url = twin_path(f"/infestations?{filters.query_string()}")
    name = "infestations/_results.html" if is_fragment_request(request) else "infestations/index.html"
    return page(request, name, context, json_url=json_url, vary_hx=True, tags=tags)


async def _infestation(raw_key: str) -> tuple[dict[str, Any], datetime | None]:
    infestation, refreshed_at = await queries.get_infestation_dated(raw_key)
    if infestation is None or infestation["repo_count"] < 1:
        raise NotFound({"pattern_key": ["not found"]}, message="No infestation is recorded under this pattern key.")
    return infestation, refreshed_at


@contextmanager
def _bad_cursor_is_400() -> Iterator[None]:
    try:
        yield
    except InvalidCursor as exc:
        raise BadRequest(
            exc.errors, title="Bad cursor", message="The cursor in this address is not one this site issued."
        ) from exc


async def _show_data(request: Request, *, with_repositories: bool = True) -> dict[str, Any]:
    """Everything the show page and its twin need (404 unknown key, 400 bad cursor).

    The reads run at once, each on its own read session (`queries` opens one per call) and each under the
    read-time guard: the page waits for the slowest read instead of their sum. An unknown key still answers 404
    before a bad cursor's 400, as when they ran one after the other."""
    key = queries.parse_pattern_key(request.path_params["pattern_key"])
    if key is None:
        await _infestation(request.path_params["pattern_key"])  # the one 404 of an unknown key
    assert key is not None
    cursor = request.query_params.get("cursor") or None
    empty: Page[dict[str, Any]] = {"entries": [], "next_cursor": None}

    async def repositories_page() -> Page[dict[str, Any]]:
        if not with_repositories:
            return empty
        repos_cursor = request.query_params.get("repos_cursor") or None
        return await memberships.list_pattern_repos_page(key, limit=SATELLITE_CAP, cursor=repos_cursor)

    found, instances, repositories = await asyncio.gather(
        _infestation(key),
        queries.list_instances_page(key, limit=LEDGER_PAGE, cursor=cursor),
        repositories_page(),
        return_exceptions=True,
    )
    for outcome in (found, instances, repositories):  # the first failure in the order the reads used to run
        if isinstance(outcome, BaseException):
            with _bad_cursor_is_400():
                raise outcome
    assert not isinstance(found, BaseException)
    infestation, refreshed_at = found
    return {
        "infestation": infestation,
        "refreshed_at": refreshed_at,
        "instances": instances,
        "repositories": repositories,
        "cursor": cursor,
    }


@rendered_once(_paged_key)
async def show(request: Request) -> Response:
    data = await _show_data(request)
    if wants_json(request):
        return json_twin(
            InfestationShow(
                infestation=infestation(data["infestation"]),
                refreshed_at=iso(data["refreshed_at"]),
                repositories=affected_repository_page(data["repositories"]),
                instances=instance_page(data["instances"]),
            ),
            tags=_show_tags(data),
        )
    return _show_page(request, data, path=infestation_path(data["infestation"]["pattern_key"]))


def _twin_of(request: Request, path: str) -> str:
    """The JSON of exactly this page: its canonical path with `.json` and the paging parameters it was asked for
    (a twin without the cursor would hand a client page 1 again, forever)."""
    query = urlencode({k: v for k in ("cursor", "repos_cursor") if (v := request.query_params.get(k))})
    return twin_path(f"{path}?{query}" if query else path)


def _show_page(request: Request, data: dict[str, Any], *, path: str) -> Response:
    context = {
        **data,
        "graph": hub_layout(data["infestation"], data["repositories"]["entries"], cap=SATELLITE_CAP),
    }
    json_url = _twin_of(request, path)
    return page(request, "infestations/show.html", context, json_url=json_url, vary_hx=True, tags=_show_tags(data))


@rendered_once(_paged_key)
async def instances(request: Request) -> Response:
    """The ledger from `?cursor=`: the page of rows as JSON for the twin, rows plus the next control for htmx
    (appended in place), the whole show page (starting at the cursor) for everyone else."""
    if wants_json(request):
        infestation, _ = await _infestation(request.path_params["pattern_key"])
        with _bad_cursor_is_400():
            rows = await queries.list_instances_page(
                infestation["pattern_key"], limit=LEDGER_PAGE, cursor=request.query_params.get("cursor") or None
            )
        tags = [ATLAS_TAG, pattern_tag(infestation["pattern_key"]), *_repository_tags(rows["entries"])]
        return json_twin(instance_page(rows), tags=tags)
    fragment = is_fragment_request(request)
    data = await _show_data(request, with_repositories=not fragment)
    path = f"{infestation_path(data['infestation']['pattern_key'])}/instances"
    if not fragment:
        return _show_page(request, data, path=path)
    json_url = _twin_of(request, path)
    tags = _show_tags(data)
    return page(request, "infestations/_ledger_fragment.html", data, json_url=json_url, vary_hx=True, tags=tags)


routes: list[BaseRoute] = [
    Route("/infestations{format:format}", index, methods=["GET", "HEAD"], name="infestations"),
    Route(
        "/infestations/{pattern_key}/instances{format:format}",
        instances,
        methods=["GET", "HEAD"],
        name="infestation_instances",
    ),
    Route("/infestations/{pattern_key:stem}{format:format}", show, methods=["GET", "HEAD"], name="infestation"),
]
