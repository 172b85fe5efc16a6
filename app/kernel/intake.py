"""The one way a request body comes in: authenticate, allowance, bounded read, budgeted parse off the loop, then the
handler's transaction (docs/security.md "Body budget")."""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import regex
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.kernel import ratelimit
from app.kernel.config import settings
from app.kernel.errors import BadRequest, DomainError, TooLarge, ValidationError
from app.kernel.forms import FormLimits
from app.kernel.limits import MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, MAX_JSON_VALUES, body_limit, too_large
from app.kernel.text import ascii_int

T = TypeVar("T")
C = TypeVar("C")

# Two threads per process: body work is CPU work, and more threads only take the GIL from the event loop.
INTAKE_THREADS = 2
_executor = ThreadPoolExecutor(max_workers=INTAKE_THREADS, thread_name_prefix="tarakan-intake")


class Budget:
    """CPU seconds one request's body work may take, counted on the thread doing it (not its wait for one)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._start = time.thread_time()

    def spent(self) -> float:
        return time.thread_time() - self._start

    def remaining(self) -> float:
        return max(0.0, self.seconds - self.spent())

    def check(self) -> None:
        if self.spent() > self.seconds:
            raise over_budget(self.seconds)


class OverBudget(TooLarge):
    """The 413 of a body that needed more than its request's budget (a batch tells it from its lines' own faults)."""


def over_budget(seconds: float) -> DomainError:
    return OverBudget(
        {"body": [f"needed more than {seconds:g} s of processing (the per-request budget); send a smaller document"]},
        message=f"The request took more than this address's processing budget ({seconds:g} s) to read.",
    )


async def off_loop(work: Callable[[Budget], T], *, seconds: float | None = None) -> T:
    """`work(budget)` on an intake thread, the budget starting when the thread does."""
    limit = settings().body_budget_seconds if seconds is None else seconds
    context = contextvars.copy_context()

    def run() -> T:
        return context.run(work, Budget(limit))

    return await asyncio.get_running_loop().run_in_executor(_executor, run)


@dataclass(frozen=True)
class Body:
    """A request body as read, with what a parser may look at."""

    raw: bytes
    content_type: str  # the whole header, parameters included
    query: Mapping[str, str]

    @property
    def media_type(self) -> str:
        return self.content_type.split(";")[0].strip().lower()


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with a 413 as soon as it is declared or streamed past `limit` bytes."""
    declared = ascii_int(request.headers.get("content-length"))
    if declared is not None and declared > limit:
        raise too_large(limit)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise too_large(limit)
    return bytes(data)


# --- parsers: plain functions of (Body, Budget), run on an intake thread ----------------------------------------


def _depth_exceeds(value: Any, maximum: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > maximum:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


# A JSON string (its escapes included), found without backtracking: what lies outside them is structure.
_JSON_STRING = regex.compile(rb'"(?:[^"\\]++|\\.)*+"')


def _structure_counts(structure: bytes) -> tuple[int, int]:
    """(objects and arrays, values and member names) of JSON text whose strings are `""` (or not yet removed: an
    upper bound). Outside strings each member name is followed by one colon and each value after a container's
    first by one comma: values and names are at most colons + commas + containers + 1 (exact when none is empty)."""
    containers = structure.count(b"[") + structure.count(b"{")
    return containers, containers + structure.count(b",") + structure.count(b":") + 1


def _counts(raw: bytes) -> tuple[int, int]:
    """`_structure_counts` of a JSON text (upper bounds for invalid JSON), counted before it is parsed: the parser
    holds the GIL, and millions of containers, or of keys and values, make it (and the collector) stall every
    thread (466,000 keys: a third of a second)."""
    containers, values = _structure_counts(raw)  # brackets, commas, colons inside strings too: exact when it matters
    if containers <= MAX_JSON_CONTAINERS and values <= MAX_JSON_VALUES:
        return containers, values
    return _structure_counts(_JSON_STRING.sub(b'""', raw, concurrent=True))


def require_json_counts(raw: bytes) -> None:
    """413 when a JSON text (or a batch of them) holds more than MAX_JSON_CONTAINERS objects and arrays, or more
    than MAX_JSON_VALUES values and member names."""
    containers, values = _counts(raw)
    if containers > MAX_JSON_CONTAINERS:
        raise TooLarge(
            {"body": [f"must hold at most {MAX_JSON_CONTAINERS} JSON objects and arrays"]},
            message=f"The request body holds more than {MAX_JSON_CONTAINERS} JSON objects and arrays.",
        )
    if values > MAX_JSON_VALUES:
        raise TooLarge(
            {"body": [f"must hold at most {MAX_JSON_VALUES} JSON values and member names"]},
            message=f"The request body holds more than {MAX_JSON_VALUES} JSON values and member names.",
        )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_object(body: Body, budget: Budget, *, non_object_status: int = 422) -> dict[str, Any]:
    """Valid JSON without NaN or Infinity, at most MAX_JSON_CONTAINERS objects and arrays and MAX_JSON_VALUES values
    and member names (413, counted before parsing), nested at most MAX_JSON_DEPTH levels (400), an object
    (`non_object_status`: the report API's 422, the repository API's 400, each as documented)."""
    require_json_counts(body.raw)
    budget.check()
    try:
        value = json.loads(body.raw, parse_constant=_reject_constant)
    except RecursionError:
        raise BadRequest({"body": [f"must be nested at most {MAX_JSON_DEPTH} levels deep"]}) from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise BadRequest({"body": ["must be valid JSON"]}) from None
    budget.check()
    if _depth_exceeds(value, MAX_JSON_DEPTH):
        raise BadRequest({"body": [f"must be nested at most {MAX_JSON_DEPTH} levels deep"]})
    if not isinstance(value, dict):
        raise ValidationError({"body": ["must be a JSON object"]}, status_code=non_object_status)
    return value


def form_parser(limits: FormLimits) -> Callable[[Body, Budget], FormData]:
    """A parser for the site's small forms under `limits` (a 400 naming `form` beyond them), with Starlette's own
    form parsing, run to completion on the intake thread."""

    def parse(body: Body, budget: Budget) -> FormData:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body.raw, "more_body": False}

        scope = {"type": "http", "method": "POST", "headers": [(b"content-type", body.content_type.encode("latin-1"))]}

        async def read() -> FormData:
            return await Request(scope, receive).form(
                max_files=limits.max_files, max_fields=limits.max_fields, max_part_size=limits.max_part_size
            )

        try:
            return asyncio.run(read())
        except MultiPartException as exc:  # a multipart limit or a malformed part
            raise BadRequest({"form": [exc.message]}) from None
        except HTTPException as exc:  # Starlette's answer to an urlencoded limit
            raise BadRequest({"form": [str(exc.detail)]}) from None

    return parse


# --- the route --------------------------------------------------------------------------------------------------


def refused_window() -> ratelimit.Window:
    return ratelimit.Window(
        "refused",
        settings().refused_per_minute,
        60,
        "at most {limit} refused submissions a minute per API token: fix what the earlier answers named first",
    )


def refused_status(status: int) -> bool:
    """A refusal the sender pays for: a 4xx other than 401 (an unknown token is nobody's to charge) and 429."""
    return 400 <= status < 500 and status not in (401, 429)


def counts_as_refused(exc: DomainError) -> bool:
    return refused_status(exc.status_code)


class BodyRoute(Route):
    """A route whose body went through `body_route` (the router test looks for this type)."""


def body_route(
    path: str,
    handle: Callable[[Request, C, T], Awaitable[Response]],
    *,
    authenticate: Callable[[Request], Awaitable[C]],
    parse: Callable[[Body, Budget], T],
    allowance: Callable[[C], str | None] | None = None,
    limit: int | None = None,
    name: str | None = None,
    method: str = "POST",
) -> BodyRoute:
    """A POST route (or `method`, another unsafe one: DELETE): `authenticate` (and check the scope) → the caller's
    refused-attempt allowance (`allowance` names what it counts against; None: exempt) → the body under `limit`
    bytes (default: the path's) → `parse` off the loop under the budget → `handle(request, caller, parsed)`, which
    opens the transaction."""

    async def endpoint(request: Request) -> Response:
        caller = await authenticate(request)
        subject = allowance(caller) if allowance is not None else None
        window = refused_window()
        if subject is not None:
            await ratelimit.require_below(window, subject)
        try:
            raw = await read_body(request, body_limit(request.url.path) if limit is None else limit)
            body = Body(raw, request.headers.get("content-type", ""), request.query_params)
            parsed = await off_loop(lambda budget: parse(body, budget))
            return await handle(request, caller, parsed)
        except DomainError as exc:
            if subject is not None and counts_as_refused(exc):
                await ratelimit.count(window, subject)
            raise

    return BodyRoute(path, endpoint, methods=[method], name=name)
