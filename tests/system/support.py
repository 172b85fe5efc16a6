"""What the multi-process system tests share: the fleet's settings, waiting for the drain, and a burst of reports
spread over several servers through the real API."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
from sqlalchemy import text

from app.accounts.models import Account
from app.kernel import db, queue
from app.registry.models import Repository
from app.reports.finding_memory import pattern_key
from app.reports.models import CanonicalFinding, Scan, ScanFinding
from tests.sql import execute, scalar

PASSWORD = "correct horse battery staple"
WORKER_ENV = {"INFESTATIONS_CLAIM_SECONDS": "3", "INFESTATIONS_HOT_KEY_INTERVAL": "1"}


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        await asyncio.sleep(0.1)


async def dirty_count() -> int:
    return int(await scalar("SELECT count(*) FROM infestation_dirty_keys"))


async def no_dirty_key() -> bool:
    return await dirty_count() == 0


TITLES = [
    "SQL injection in login handler",
    "Hard-coded AWS secret key",
    "Path traversal in upload handler",
    "Open redirect after login",
]
BURST = 40
REPOSITORIES = 8


def burst_report(i: int) -> dict[str, Any]:
    """Report i: two findings whose titles rotate, so every title lands in several repositories."""
    findings = [
        {
            "file": f"src/module{i}_{n}.py",
            "line_start": 10 + n,
            "line_end": 12 + n,
            "severity": "high",
            "title": TITLES[(i + n) % len(TITLES)],
            "description": "found by the multi-instance burst",
        }
        for n in range(2)
    ]
    return {
        "commit_sha": f"{i:040x}",
        "model": "gpt-test",
        "prompt_version": "review/v1",
        "run_id": f"burst-{i}",
        "document": {"tarakan_scan_format": 1, "findings": findings},
    }


async def submit_burst(servers: Sequence[str], bearer: dict[str, str], repos: Sequence[Repository]) -> None:
    """POST the BURST reports round-robin over `servers` and `repos` (8 at a time); every one must be a 201."""
    limit = asyncio.Semaphore(8)
    async with httpx.AsyncClient(timeout=30) as http:

        async def submit(i: int) -> httpx.Response:
            repo = repos[i % len(repos)]
            async with limit:
                return await http.post(
                    f"{servers[i % len(servers)]}/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/reports",
                    headers=bearer,
                    content=json.dumps(burst_report(i)),
                )

        responses = await asyncio.gather(*(submit(i) for i in range(BURST)))
    assert [r.status_code for r in responses] == [201] * BURST, [r.text for r in responses if r.status_code != 201]


async def run_singletons_three_times(slot: str) -> dict[str, list[bool]]:
    """Three triggers of the hourly and the nightly singleton for one slot, all due at the same instant (as when
    every worker's cron fires on time); what each trigger returned (True: it ran the slot), sorted."""
    due = datetime.now(UTC) + timedelta(seconds=1)
    redis = await queue.pool()
    triggers: dict[str, list[Any]] = {}
    for n in range(3):
        for job_name in ("recompute_windows_job", "reconcile_job"):
            job = await redis.enqueue_job(
                job_name, slot=slot, _job_id=f"{job_name}:{slot}:{n}:{uuid.uuid4().hex}", _defer_until=due
            )
            assert job is not None
            triggers.setdefault(job_name, []).append(job)
    return {name: sorted([await job.result(timeout=30) for job in jobs]) for name, jobs in triggers.items()}


# --- Hostile shapes (tests/system/test_hostile_corpus.py, bench/hostile_bench.py) -------------------------------
# Worst-case request bodies at the size limits, generated per content type from a route's valid body (its skeleton:
# the OpenAPI example) and its body limit, so a new route or a new content type is covered by construction. JSON
# values are written with `ensure_ascii` (a lone surrogate travels as the escape `\ud800`, as an attacker sends it).

SARIF_TYPE = "application/sarif+json"
URLENCODED = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
FORM_TYPES = (URLENCODED, MULTIPART)
# the fields the site's forms read (login, logout, moderation): every form shape fills all of them
FORM_FIELDS = (
    "email",
    "password",
    "next",
    "visibility",
    "listing_status",
    "platform_role",
    "state",
    "reason",
    "notes",
    "return_to",
)
# lone surrogates, NUL, bidi overrides and isolates, combining marks, joiners, a BOM, a noncharacter, an astral char
UNICODE_EDGES = "\ud800\udfff\x00\u202e\u2066\u200f" + "e" + "\u0301" * 16 + "\u200d\ufeff\uffff\U0001f41b"
SARIF_COMMIT = "a" * 40


@dataclass(frozen=True)
class ShapeInput:
    """What a shape is generated from: the route's valid body (`{}` when none), its body limit in bytes, and the
    JSON nesting bound (app/kernel/limits.py MAX_JSON_DEPTH)."""

    skeleton: dict[str, Any]
    limit: int
    max_depth: int


@dataclass(frozen=True)
class HostileBody:
    content_type: str  # the Content-Type header to send (a multipart boundary included)
    data: bytes


@dataclass(frozen=True)
class Shape:
    name: str
    build: Callable[[ShapeInput, str], HostileBody]  # (input, the route's content type) -> body


def compact_json(value: Any) -> bytes:
    """JSON without spaces after separators: the encoding every shape is sized in."""
    return json.dumps(value, separators=(",", ":")).encode()


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _objects(value: Any, depth: int = 1) -> list[tuple[dict[str, Any], int]]:
    """Every object in `value` with its nesting depth (the top level is 1), outermost first."""
    found: list[tuple[dict[str, Any], int]] = []
    if isinstance(value, dict):
        found.append((value, depth))
        children: Iterable[Any] = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return found
    for child in children:
        found.extend(_objects(child, depth + 1))
    return found


def _strings(value: Any) -> list[tuple[dict[str, Any] | list[Any], str | int]]:
    """Where every string leaf of `value` sits: (container, key)."""
    found: list[tuple[dict[str, Any] | list[Any], str | int]] = []
    items: Iterable[tuple[str | int, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return found
    for key, child in items:
        if isinstance(child, str):
            found.append((value, key))
        else:
            found.extend(_strings(child))
    return found


def nest(levels: int) -> Any:
    """`levels` arrays one inside the other around a 0 (its nesting depth is `levels`)."""
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def pad_to(body: dict[str, Any], size: int, key: str = "hostile_pad") -> bytes:
    """`body` with a string under `key` making its compact JSON exactly `size` bytes (at least the body)."""
    body = {**body, key: ""}
    room = size - len(compact_json(body))
    return compact_json({**body, key: "p" * max(0, room)})


def _room(skeleton: dict[str, Any], limit: int, reserve: int = 4096) -> int:
    """Bytes left for hostile content in a body of `limit` bytes around `skeleton`."""
    return max(0, limit - len(compact_json(skeleton)) - reserve)


def _json(build: Callable[[ShapeInput], Any]) -> Callable[[ShapeInput, str], HostileBody]:
    """A shape written as a JSON value (or raw bytes) and sent with the route's content type."""

    def shape(given: ShapeInput, content_type: str) -> HostileBody:
        value = build(given)
        return HostileBody(content_type, value if isinstance(value, bytes) else compact_json(value))

    return shape


def _splice(body: dict[str, Any], key: str, raw: bytes) -> bytes:
    """`body` as compact JSON with `key` set to the JSON text `raw` (large values are written as bytes: encoding
    millions of small objects would take longer than sending them)."""
    return compact_json({**body, key: "@@SPLICE@@"}).replace(b'"@@SPLICE@@"', raw, 1)


def _deep_at_limit(given: ShapeInput) -> bytes:
    """Every object carries an array nest reaching exactly the depth bound, and the top level a list of such nests
    filling the body: the most containers the parser and the depth check walk without refusing."""
    body = _copy(given.skeleton)
    for obj, depth in _objects(body):
        obj["hostile_deep"] = nest(given.max_depth - depth)
    unit = compact_json(nest(given.max_depth - 2))
    count = _room(body, given.limit) // (len(unit) + 1)
    return _splice(body, "hostile_nests", b"[" + b",".join([unit] * count) + b"]")


def _deep_beyond(given: ShapeInput) -> Any:
    body = _copy(given.skeleton)
    body["hostile_deep"] = nest(given.max_depth)  # the top object is level 1: this reaches max_depth + 1
    return body


def _many_keys(given: ShapeInput) -> bytes:
    """The body's own object with as many more keys as the limit holds."""
    body = _copy(given.skeleton)
    count = _room(body, given.limit) // len('"k0000000":0,')
    keys = b",".join(b'"k%07d":0' % i for i in range(count))
    rest = compact_json(body)[1:]  # after the opening brace: "}" or the skeleton's members and "}"
    return b"{" + keys + (b"," if rest != b"}" else b"") + rest


def _long_strings(given: ShapeInput) -> Any:
    """Every string of the body, and a new one in every object, as long as the body allows."""
    body = _copy(given.skeleton)
    for obj, _depth in _objects(body):
        obj["hostile_text"] = ""
    places = _strings(body)
    share = _room(body, given.limit) // max(1, len(places))
    for container, key in places:
        container[key] = ("Lorem ipsum dolor sit amet " * (share // 27 + 1))[:share]  # type: ignore[index]
    return body


def _unicode_edges(given: ShapeInput) -> Any:
    """Unicode edge cases (escaped: `\\ud800`, `\\u0000`, `\\u202e`, combining marks) appended to every string and
    filling a new string in every object."""
    body = _copy(given.skeleton)
    for container, key in _strings(body):
        container[key] = container[key] + UNICODE_EDGES  # type: ignore[index]
    objects = _objects(body)
    per_unit = len(compact_json(UNICODE_EDGES)) - 2
    share = _room(body, given.limit) // max(1, len(objects)) // per_unit
    for obj, _depth in objects:
        obj["hostile_unicode"] = UNICODE_EDGES * share
    return body


def _invalid_utf8(given: ShapeInput) -> bytes:
    """The body with raw (unescaped) bidi and combining text filling it and an encoded surrogate (invalid UTF-8)."""
    body = _copy(given.skeleton)
    raw = ("\u202e" + "e" + "\u0301" * 8).encode()
    body["hostile_raw"] = "@@RAW@@"
    data = compact_json(body)
    filler = raw * (_room(body, given.limit) // len(raw)) + b"\xed\xa0\x80"
    return data.replace(b"@@RAW@@", filler, 1)


def _many_values(given: ShapeInput) -> bytes:
    body = _copy(given.skeleton)
    count = _room(body, given.limit) // len('"ab",')
    return _splice(body, "hostile_values", b"[" + b",".join([b'"ab"'] * count) + b"]")


def _huge_numbers(given: ShapeInput) -> bytes:
    """Integers of 4,300 digits (the most Python converts) filling the body, and 1e999 (infinity once parsed) in
    every object."""
    body = _copy(given.skeleton)
    for obj, _depth in _objects(body):
        obj["hostile_inf"] = "@@INF@@"
    body["hostile_numbers"] = "@@NUMBERS@@"
    data = compact_json(body).replace(b'"@@INF@@"', b"1e999")
    digits = b"9" * 4300
    numbers = b"[" + b",".join([digits] * (_room(body, given.limit) // (len(digits) + 1))) + b"]"
    return data.replace(b'"@@NUMBERS@@"', numbers, 1)


def _at_limit(given: ShapeInput) -> bytes:
    return pad_to(_copy(given.skeleton), given.limit)


def _over_limit(given: ShapeInput) -> bytes:
    return pad_to(_copy(given.skeleton), given.limit + 1)


JSON_SHAPES = [
    Shape("deep JSON at the depth limit, filling the body", _json(_deep_at_limit)),
    Shape("deep JSON one level beyond the limit", _json(_deep_beyond)),
    Shape("open brackets filling the body", _json(lambda given: b"[" * given.limit)),
    Shape("many keys filling the body", _json(_many_keys)),
    Shape("long strings in every field", _json(_long_strings)),
    Shape("unicode edges (lone surrogates, NUL, RTL, combining)", _json(_unicode_edges)),
    Shape("raw bidi text ending in invalid UTF-8", _json(_invalid_utf8)),
    Shape("many small values filling the body", _json(_many_values)),
    Shape("4,300-digit integers and 1e999", _json(_huge_numbers)),
    Shape("valid body at the body limit", _json(_at_limit)),
    Shape("one byte over the body limit", _json(_over_limit)),
]


# SARIF 2.1.0 logs (docs/sarif.md): one run of one tool at SARIF_COMMIT


def sarif_log(
    results: list[dict[str, Any]],
    *,
    rules: list[dict[str, Any]] | None = None,
    bases: dict[str, Any] | None = None,
    runs: int = 1,
) -> dict[str, Any]:
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "hostile", "version": "1.0", "rules": rules or []}},
        "versionControlProvenance": [
            {"repositoryUri": "https://github.com/hostile/corpus", "revisionId": SARIF_COMMIT}
        ],
        "results": results,
    }
    if bases is not None:
        run["originalUriBaseIds"] = bases
    extra = {"tool": {"driver": {"name": "hostile"}}, "results": []}
    return {"version": "2.1.0", "runs": [run] + [extra] * (runs - 1)}


def sarif_result(i: int, *, base: str | None = None, **extra: Any) -> dict[str, Any]:
    artifact: dict[str, Any] = {"uri": f"src/module{i}.py"}
    if base is not None:
        artifact["uriBaseId"] = base
    location = {"physicalLocation": {"artifactLocation": artifact, "region": {"startLine": 1 + i % 500}}}
    return {"ruleId": "R1", "level": "error", "message": {"text": f"Result {i}"}, "locations": [location], **extra}


SARIF_SKELETON = sarif_log([sarif_result(0)])


def _sarif(build: Callable[[int], dict[str, Any]]) -> Callable[[ShapeInput, str], HostileBody]:
    """A SARIF shape: built for the route's body limit, sent with the route's content type."""
    return lambda given, content_type: HostileBody(content_type, compact_json(build(given.limit)))


def self_referential_base(size: int) -> dict[str, Any]:
    """A base that names itself (`"uriBaseId": "B"` in B) with a uri of `./` filling `size` bytes, and 200 results
    whose artifactLocation uses it (issue 22: a 133 kB log of this shape froze the web process for 6.7 s)."""
    results = [sarif_result(i, base="B") for i in range(200)]
    room = size - len(compact_json(sarif_log(results, bases={"B": {"uri": "", "uriBaseId": "B"}})))
    return sarif_log(results, bases={"B": {"uri": "./" * max(1, room // 2), "uriBaseId": "B"}})


def deep_base_chain(size: int, depth: int = 40) -> dict[str, Any]:
    """`depth` distinct bases, each relative to the next (B0 -> B1 -> ...), each a long uri of `./` segments (which
    normalize away, so every result's path stays valid) before its own directory, sharing `size` bytes; 200
    results use B0."""
    results = [sarif_result(i, base="B0") for i in range(200)]
    dots = ((size - len(compact_json(sarif_log(results)))) // depth - 64) // 2
    bases = {f"B{n}": {"uri": "./" * dots + f"d{n}/", "uriBaseId": f"B{n + 1}"} for n in range(depth)}
    return sarif_log(results, bases=bases)


def huge_rule_text(size: int) -> dict[str, Any]:
    """One rule whose shortDescription, fullDescription and help are ~1 MB each (as the limit allows), shared by
    200 results (issue 22: ~7 ms a result)."""
    results = [sarif_result(i, message={"text": "see the rule"}) for i in range(200)]
    share = min(1_000_000, (size - len(compact_json(sarif_log(results))) - 4096) // 3)
    text = ("word " * (share // 5 + 1))[:share]
    rule = {
        "id": "R1",
        "name": "huge",
        "shortDescription": {"text": text},
        "fullDescription": {"text": text[::-1]},
        "help": {"text": text.upper()},
    }
    return sarif_log(results, rules=[rule])


def many_results(size: int) -> dict[str, Any]:
    """As many small valid results as the limit holds, far over the findings cap."""
    unit = len(compact_json(sarif_result(99_999))) + 1
    count = (size - len(compact_json(SARIF_SKELETON))) // unit
    return sarif_log([sarif_result(i) for i in range(count)])


def many_skipped_results(size: int) -> dict[str, Any]:
    """As many empty results as the limit holds: each is counted and skipped (no location), none stored."""
    return sarif_log([{}] * ((size - len(compact_json(SARIF_SKELETON))) // 3))


def message_templates(size: int) -> dict[str, Any]:
    """A ~1 MB message template of `{0}`..`{19}` placeholders shared by 200 results, each filling it with 20 long
    arguments."""
    placeholders = "".join("{" + str(n) + "}" for n in range(20))
    template = placeholders * (1_000_000 // len(placeholders))
    rule = {"id": "R1", "messageStrings": {"m": {"text": template}}}
    base = len(compact_json(sarif_log([], rules=[rule])))
    argument = max(1, (size - base - 200 * 300) // (200 * 20) - 4)
    results = [
        sarif_result(i, message={"id": "m", "arguments": [chr(97 + n) * argument for n in range(20)]})
        for i in range(200)
    ]
    return sarif_log(results, rules=[rule])


def many_runs(size: int) -> dict[str, Any]:
    """As many (empty) runs of the one tool as the limit holds."""
    unit = len(compact_json({"tool": {"driver": {"name": "hostile"}}, "results": []})) + 1
    return sarif_log([sarif_result(0)], runs=(size - len(compact_json(SARIF_SKELETON))) // unit)


SARIF_SHAPES = [
    Shape("SARIF self-referential base, 133 kB", _sarif(lambda limit: self_referential_base(133_000))),
    Shape("SARIF self-referential base at the body limit", _sarif(lambda limit: self_referential_base(limit))),
    Shape("SARIF deep chain of distinct bases with long uris", _sarif(deep_base_chain)),
    Shape("SARIF huge rule texts shared by 200 results", _sarif(huge_rule_text)),
    Shape("SARIF many results (far over the findings cap)", _sarif(many_results)),
    Shape("SARIF many skipped results", _sarif(many_skipped_results)),
    Shape("SARIF message templates with many placeholders", _sarif(message_templates)),
    Shape("SARIF many runs", _sarif(many_runs)),
]


# NDJSON batches (POST /api/v1/reports/batch): the skeleton is one line's valid body. Every JSON shape twice: as
# the one line of a body, and built at a line's share of the body repeated on every line the batch holds; then the
# shapes only a batch has (every line a distinct valid report full of findings, too many lines, blank lines).

NDJSON_TYPE = "application/x-ndjson"


def _max_lines() -> int:
    from app.reports.batch import MAX_BATCH_LINES

    return MAX_BATCH_LINES


def _one_line(shape: Shape) -> Shape:
    return Shape(
        f"one line: {shape.name}",
        lambda given, content_type: HostileBody(content_type, shape.build(given, content_type).data),
    )


def _every_line(shape: Shape) -> Shape:
    def build(given: ShapeInput, content_type: str) -> HostileBody:
        count = _max_lines()
        share = ShapeInput(given.skeleton, given.limit // count - 1, given.max_depth)
        return HostileBody(content_type, b"\n".join([shape.build(share, content_type).data] * count))

    return Shape(f"{_max_lines()} lines: {shape.name}", build)


def _distinct_reports(given: ShapeInput, content_type: str) -> HostileBody:
    """As many lines as a batch holds, each a distinct valid report (its own run and commit) with as many findings
    as its share of the body holds: the most writing one request can ask for."""
    count = _max_lines()
    template = _copy(given.skeleton)
    findings = template.get("document", {}).get("findings") or [
        {"file": "a.py", "severity": "low", "title": "t", "description": "d"}
    ]
    unit = len(compact_json(findings[0])) + 16
    per_line = max(1, min(200, (given.limit // count - len(compact_json(template)) - 64) // unit))
    lines = []
    for i in range(count):
        body = _copy(template)
        body["run_id"], body["commit_sha"] = f"hostile-batch-{i}", f"{i + 1:040x}"
        body.setdefault("document", {"tarakan_scan_format": 1})["findings"] = [
            {**findings[0], "file": f"src/f{i}_{n}.py", "title": f"Hostile batch finding {n}"} for n in range(per_line)
        ]
        lines.append(compact_json(body))
    return HostileBody(content_type, b"\n".join(lines) + b"\n")


def ndjson_shapes() -> list[Shape]:
    return (
        [_one_line(shape) for shape in JSON_SHAPES]
        + [_every_line(shape) for shape in JSON_SHAPES]
        + [
            Shape("every line a distinct valid report full of findings", _distinct_reports),
            Shape(
                "one line more than a batch holds",
                lambda g, t: HostileBody(t, b"\n".join([compact_json(g.skeleton)] * (_max_lines() + 1))),
            ),
            Shape("blank lines filling the body", lambda g, t: HostileBody(t, b"\n" * g.limit)),
            Shape("CRLF lines of open brackets", lambda g, t: HostileBody(t, b"[\r\n" * (g.limit // 3))),
        ]
    )


# The site's forms: urlencoded and multipart bodies at the site's body limit


def _urlencoded(pairs: list[tuple[str, str]]) -> HostileBody:
    return HostileBody(URLENCODED, urlencode(pairs).encode())


def _form_fields_filling(limit: int, value: str) -> list[tuple[str, str]]:
    """Every form field, each `value` repeated to share `limit` bytes once encoded."""
    unit = len(urlencode([("v", value)])) - 2
    share = max(1, (limit - 256) // len(FORM_FIELDS) // unit)
    return [(name, value * share) for name in FORM_FIELDS]


def _urlencoded_sized(limit: int) -> HostileBody:
    """Every form field with a long value, the body exactly `limit` bytes."""
    pairs = _form_fields_filling(limit, "x")
    size = len(urlencode(pairs))
    name, value = pairs[-1]
    pairs[-1] = (name, value + "x" * (limit - size))
    return _urlencoded(pairs)


def _multipart(parts: list[tuple[str, str | None, bytes]], *, close: bool = True) -> HostileBody:
    """(field name, file name or None, content) parts as one multipart body."""
    boundary = "hostile" + "x" * 24
    chunks = []
    for name, filename, content in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
        if filename is not None:
            head += "Content-Type: application/octet-stream\r\n"
        chunks.append(head.encode() + b"\r\n" + content + b"\r\n")
    if close:
        chunks.append(f"--{boundary}--\r\n".encode())
    return HostileBody(f"{MULTIPART}; boundary={boundary}", b"".join(chunks))


def _many_parts(limit: int, *, files: bool) -> HostileBody:
    unit = len(_multipart([("f00000", "f00000.txt" if files else None, b"x")], close=False).data)
    count = (limit - 64) // unit
    return _multipart([(f"f{i:05d}", f"f{i:05d}.txt" if files else None, b"x") for i in range(count)])


def _one_big_file(limit: int) -> HostileBody:
    head = _multipart([("notes", "big.bin", b"")]).data
    return _multipart([("notes", "big.bin", b"\x00" * (limit - len(head)))])


FORM_SHAPES = {
    URLENCODED: [
        Shape(
            "many fields filling the body",
            lambda g, t: _urlencoded([(f"f{i:05d}", "1") for i in range(g.limit // len("f00000=1&"))]),
        ),
        Shape("every field huge, the body at the limit", lambda g, t: _urlencoded_sized(g.limit)),
        Shape("one byte over the body limit", lambda g, t: _urlencoded_sized(g.limit + 1)),
        Shape(
            "unicode edges (NUL, lone surrogate bytes, RTL, combining) in every field",
            lambda g, t: HostileBody(
                URLENCODED,
                urlencode(_form_fields_filling(g.limit - 2048, UNICODE_EDGES[2:]), encoding="utf-8").encode()
                + b"&notes=%ED%A0%80%00" * 64,
            ),
        ),
    ],
    MULTIPART: [
        Shape("many file parts filling the body", lambda g, t: _many_parts(g.limit, files=True)),
        Shape("many text parts filling the body", lambda g, t: _many_parts(g.limit, files=False)),
        Shape("one file the size of the body limit", lambda g, t: _one_big_file(g.limit)),
        Shape(
            "every field huge, unterminated",
            lambda g, t: _multipart(
                [(name, None, value.encode()) for name, value in _form_fields_filling(g.limit - 1024, "y")],
                close=False,
            ),
        ),
    ],
}


def shapes_for(content_type: str) -> list[Shape]:
    """The hostile shapes of a content type: JSON ones for every JSON type (`+json` included), the SARIF ones on
    top for SARIF, the NDJSON ones (the JSON ones per line, and a batch's own) for NDJSON, the form ones for forms. A type without shapes is a KeyError: a new kind of body must bring its
    generators before it can be served."""
    media = content_type.split(";")[0].strip().lower()
    if media == SARIF_TYPE:
        return JSON_SHAPES + SARIF_SHAPES
    if media == NDJSON_TYPE:
        return ndjson_shapes()
    if media == "application/json" or media.endswith("+json"):
        return JSON_SHAPES
    return FORM_SHAPES[media]


def default_skeleton(content_type: str) -> dict[str, Any]:
    """A valid body when the document gives no example: the SARIF skeleton for SARIF, else an empty object."""
    return _copy(SARIF_SKELETON) if content_type.split(";")[0].strip().lower() == SARIF_TYPE else {}


class HealthzPoller:
    """A second client polling `/healthz` every `interval` seconds in a thread while the block runs: every wait
    (the one in flight when the block ends included) and anything other than a 200. Entering waits for the first
    answer, so the poller's connection is open before the block starts."""

    def __init__(self, base: str, *, interval: float = 0.05, timeout: float = 15.0) -> None:
        self.base, self.interval, self.timeout = base, interval, timeout
        self.waits: list[float] = []
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=self.timeout, verify=False) as client:  # plain http: no 50 ms TLS context
            while True:
                started = time.monotonic()
                try:
                    response = client.get(self.base + "/healthz")
                    if response.status_code != 200:
                        self.problems.append(f"/healthz answered {response.status_code}")
                except httpx.HTTPError as exc:
                    self.problems.append(f"/healthz failed: {type(exc).__name__} {exc}")
                self.waits.append(time.monotonic() - started)
                self._first.set()
                if self._stop.wait(self.interval):
                    return

    @property
    def worst(self) -> float:
        return max(self.waits, default=0.0)

    def __enter__(self) -> HealthzPoller:
        self._thread.start()
        self._first.wait(self.timeout)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)


@dataclass(frozen=True)
class Probe:
    """One hostile request sent while /healthz was polled: its answer (None: no answer, `error` says why), how
    long it took, and the longest /healthz wait meanwhile."""

    response: httpx.Response | None
    error: str | None
    seconds: float
    healthz_worst: float
    healthz_problems: list[str]
    healthz_polls: int

    @property
    def status(self) -> int | None:
        return self.response.status_code if self.response is not None else None


def send_while_polling(
    base: str,
    path: str,
    body: HostileBody,
    headers: dict[str, str] | None = None,
    *,
    method: str = "POST",
    timeout: float = 15.0,
) -> Probe:
    """Send `body` to `path` on one connection while `HealthzPoller` polls /healthz on another."""
    with HealthzPoller(base, timeout=timeout) as poller:
        started = time.monotonic()
        response: httpx.Response | None = None
        error: str | None = None
        try:
            with httpx.Client(timeout=timeout, verify=False) as client:
                response = client.request(
                    method,
                    base + path,
                    content=body.data,
                    headers={**(headers or {}), "Content-Type": body.content_type},
                )
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        seconds = time.monotonic() - started
    return Probe(response, error, seconds, poller.worst, poller.problems, len(poller.waits))


BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def router_body_routes() -> list[tuple[str, str]]:
    """Every (method, path template) of the app's router that takes a body (POST, PUT, PATCH), mounts walked."""
    from starlette.routing import BaseRoute, Mount, Route

    from app.main import app

    def walk(routes: list[BaseRoute], prefix: str) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for route in routes:
            if isinstance(route, Mount):
                found.extend(walk(route.routes, prefix + route.path))
            elif isinstance(route, Route):
                found.extend(
                    (method, prefix + route.path) for method in sorted((route.methods or set()) & BODY_METHODS)
                )
        return found

    return walk(app.routes, "")


def form_routes() -> list[tuple[str, str]]:
    """The HTML form routes: every body route of the router outside /api/."""
    return [(method, path) for method, path in router_body_routes() if not path.startswith("/api/")]


@dataclass(frozen=True)
class FormSubjects:
    """The form routes' subjects: a member's account and a listed repository with a public report."""

    member: Account
    repository: Repository
    scan: Scan
    canonical: CanonicalFinding
    occurrence: ScanFinding

    def path_values(self) -> dict[str, str]:
        repository = self.repository
        names = {"host": repository.host, "owner": repository.owner, "name": repository.name}
        return {**names, "scan_id": str(self.scan.id), "handle": self.member.handle}


async def form_subjects() -> FormSubjects:
    from tests import factories

    member = await factories.create_account()
    repository = await factories.create_repository()
    found = await factories.create_instance(repository, member, "SQL injection in login handler")
    return FormSubjects(member, repository, *found)


def fill_path(template: str, values: dict[str, str], default: str | None = None) -> str:
    """`template` with every `{param}` (or `{param:convertor}`) replaced by its value in `values` (a parameter
    without one takes `default`; a KeyError naming it without a default)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values and default is None:
            raise KeyError(f"no value for path parameter {name!r} of {template}: seed one")
        return values.get(name, default or "")

    return re.sub(r"\{(\w+)(?::\w+)?\}", value, template)


# --- one big pattern ---------------------------------------------------------------------------------------------

BIG_TITLE = "Server-side request forgery in webhook fetcher"
BIG_KEY = pattern_key(BIG_TITLE)
BIG_REPOSITORIES = 20
# 12,000 instances: a refresh takes ~0.5 s, long enough to be caught in the middle (the claim is polled every
# 10 ms), short enough that the full shadow comparison afterwards stays within a few seconds
BIG_PER_REPOSITORY = 600


async def build_big_pattern(account_id: int) -> None:
    """BIG_REPOSITORIES listed repositories, one public report each, BIG_PER_REPOSITORY canonicals of one pattern
    per repository with one occurrence each, written in SQL (the ORM would take minutes)."""
    params = {"key": BIG_KEY, "title": BIG_TITLE, "account": account_id}
    statements = [
        """INSERT INTO repositories (host, owner, name, canonical_url, listing_status)
           SELECT 'github.com', 'big', 'repo' || g, 'https://github.com/big/repo' || g, 'listed'
           FROM generate_series(1, :repos) g""",
        """INSERT INTO scans (repository_id, submitted_by_id, commit_sha, model, prompt_version, visibility)
           SELECT r.id, :account, substr(md5(r.id::text) || md5(r.name), 1, 40), 'gpt-test', 'review/v1', 'public'
           FROM repositories r WHERE r.owner = 'big'""",
        """INSERT INTO canonical_findings (repository_id, fingerprint, pattern_key, file_path, line_start, line_end,
             severity, title, description, status, first_seen_commit_sha, last_seen_commit_sha, detections_count)
           SELECT s.repository_id, md5(s.repository_id || ':' || n), :key, 'src/fetch' || n || '.py', 1, 1, 'high',
             :title, 'fetches any URL', 'open', s.commit_sha, s.commit_sha, 1
           FROM scans s JOIN repositories r ON r.id = s.repository_id, generate_series(1, :per_repo) n
           WHERE r.owner = 'big'""",
        """INSERT INTO scan_findings (scan_id, position, file_path, line_start, line_end, severity, title, description,
             canonical_finding_id, fingerprint, disposition)
           SELECT s.id, row_number() OVER (PARTITION BY s.id ORDER BY c.id) - 1, c.file_path, 1, 1, 'high', c.title,
             c.description, c.id, c.fingerprint, 'new'
           FROM canonical_findings c JOIN scans s ON s.repository_id = c.repository_id
           WHERE c.pattern_key = :key""",
    ]
    async with db.transaction() as session:
        for sql in statements:
            await session.execute(text(sql), {**params, "repos": BIG_REPOSITORIES, "per_repo": BIG_PER_REPOSITORY})
    await execute("ANALYZE repositories, scans, canonical_findings, scan_findings")
