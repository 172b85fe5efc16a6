"""Bulk submission (docs/domain.md §9 "Batches"): an NDJSON body of reports, every line prepared off the loop under
the request's one budget, then stored in its own transaction as the single route stores it, answered line by line
in order."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.accounts.models import Account
from app.kernel import outages, ratelimit
from app.kernel.answers import UNSET, encode
from app.kernel.errors import BadRequest, DomainError, RateLimited, ServiceUnavailable, Unauthorized, ValidationError
from app.kernel.intake import Body, Budget, OverBudget, json_object, refused_status, require_json_counts
from app.kernel.refs import REF_EXAMPLE, REF_FORMAT, parse_ref
from app.reports import service
from app.reports.intake import prepare_report
from app.reports.policy import RepositoryRateLimited
from app.reports.secrets_scanner import ScanTimedOut
from app.reports.types import BatchLine
from app.reports.validation import ReportInput

BATCH_MEDIA_TYPE = "application/x-ndjson"
MAX_BATCH_LINES = 500
# Wall-clock seconds a batch may run from its body's arrival: lines not begun by then are answered 429, to send again.
# Each line is a transaction of its own; this keeps one request's answer within a client's (and the hostile corpus's)
# patience whatever the lines hold.
BATCH_SECONDS = 5.0
MAX_REPOSITORY_REF = 1000  # characters of `repository` read (a longer one is refused, not echoed)
LINE_RETRY_AFTER = 1  # seconds: a line cut by the request's own limits may be sent again at once


@dataclass(frozen=True)
class Prepared:
    """A line validated and scanned off the loop, ready for its transaction."""

    line: int
    host: str
    owner: str
    name: str
    report: ReportInput

    @property
    def ref(self) -> tuple[str, str, str]:
        return self.host, self.owner, self.name


Parsed = Prepared | BatchLine  # a line to store, or its answer already (refused before any transaction)


@dataclass(frozen=True)
class Batch:
    lines: list[Parsed]
    started: float  # time.monotonic() when its lines began to be read (the body had arrived)


def _refusal(line: int, exc: DomainError) -> BatchLine:
    """`exc` as a line's answer; a parse error about the line's JSON names `line` (the route's `body`)."""
    errors = {("line" if field == "body" else field): messages for field, messages in exc.errors.items()}
    retry_after = exc.retry_after if isinstance(exc, RateLimited | ServiceUnavailable) else None
    return BatchLine(line=line, status=exc.status_code, errors=errors, retry_after=retry_after or UNSET)


def _cut(line: int, field: str, message: str) -> BatchLine:
    return BatchLine(line=line, status=429, errors={field: [message]}, retry_after=LINE_RETRY_AFTER)


def _unread(line: int, budget: Budget) -> BatchLine:
    return _cut(
        line,
        "budget",
        f"not read: the request's processing budget ({budget.seconds:g} s) ran out before this line was done; "
        "send it again",
    )


def _untried(line: int, limited: RateLimited) -> BatchLine:
    """A line after `limited` (a quota or rate limit reached by an earlier line of this batch) that it applies to:
    its 429, without a transaction."""
    errors = {field: [f"not tried: {message}" for message in messages] for field, messages in limited.errors.items()}
    return BatchLine(line=line, status=429, errors=errors, retry_after=limited.retry_after)


def _repository(document: dict[str, Any]) -> tuple[tuple[str, str, str] | None, dict[str, list[str]]]:
    value = document.pop("repository", None)
    if value is None:
        return None, {"repository": [f"is required: {REF_FORMAT} (e.g. {REF_EXAMPLE})"]}
    if not isinstance(value, str):
        return None, {"repository": [f"must be a string: {REF_FORMAT} (e.g. {REF_EXAMPLE})"]}
    if len(value) > MAX_REPOSITORY_REF:
        return None, {"repository": [f"must be at most {MAX_REPOSITORY_REF} characters"]}
    try:
        return parse_ref(value), {}
    except ValidationError as exc:
        return None, exc.errors


def prepare_line(number: int, raw: bytes, budget: Budget) -> Prepared:
    """One line as the single route prepares its body (the same messages), plus its `repository`."""
    raw = raw.removesuffix(b"\r")
    if not raw.strip():
        raise BadRequest({"body": ["is blank: send one report (a JSON object) a line"]})
    document = json_object(Body(raw, "application/json", {}), budget)
    ref, errors = _repository(document)
    try:
        report = prepare_report(document, budget)
    except ValidationError as exc:  # with the repository's errors; its kind kept (a scan out of time is no refusal)
        raise type(exc)(errors | exc.errors) from None
    if ref is None:
        raise ValidationError(errors)
    return Prepared(number, *ref, report)


def too_many_lines() -> DomainError:
    return DomainError(
        {"body": [f"must hold at most {MAX_BATCH_LINES} lines (one report a line): split the batch"]},
        status_code=413,
        title="Too large",
        message=f"A batch holds at most {MAX_BATCH_LINES} reports.",
    )


def parse_batch(body: Body, budget: Budget) -> Batch:
    """Every line of an NDJSON body, prepared (or refused) in order under the request's one budget, each line on
    what the lines before it left; a line after the first that it did not suffice for (not begun, or out of time
    while read or scanned) is answered 429, to send again: sent first, it gets the single route's answer. Refuses
    the whole request (nothing written) when the body is not NDJSON, holds no line, more than MAX_BATCH_LINES or
    more JSON objects and arrays, or values and member names, than one body may."""
    started = time.monotonic()
    if body.media_type != BATCH_MEDIA_TYPE:
        raise ValidationError(
            {
                "content_type": [
                    f"must be {BATCH_MEDIA_TYPE}: one report (a JSON object) a line, got {body.media_type or 'none'}"
                ]
            }
        )
    if body.raw.count(b"\n", 0, len(body.raw) - 1) >= MAX_BATCH_LINES:  # counted before 4 million lines are split
        raise too_many_lines()
    lines = body.raw.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    if not lines:
        raise ValidationError({"body": ["must hold at least one line (one report a line)"]})
    require_json_counts(body.raw)
    parsed: list[Parsed] = []
    for number, raw in enumerate(lines, start=1):
        if parsed and budget.spent() > budget.seconds:  # the first line is always read: a resubmission progresses
            parsed.append(_unread(number, budget))
            continue
        try:
            parsed.append(prepare_line(number, raw, budget))
        except (OverBudget, ScanTimedOut) as exc:  # out of time: the line's own fault only with the whole budget
            parsed.append(_unread(number, budget) if parsed else _refusal(number, exc))
        except DomainError as exc:
            parsed.append(_refusal(number, exc))
    return Batch(parsed, started)


@dataclass(frozen=True)
class Allowance:
    """The refused-attempt allowance a batch's refused lines count against (`app.kernel.intake.refused_window`)."""

    window: ratelimit.Window
    subject: str


async def store_batch(
    account: Account,
    batch: Batch,
    *,
    token_id: int | None = None,
    allowance: Allowance | None = None,
    timed: bool = True,
) -> list[BatchLine]:
    """Each prepared line stored in its own transaction (`service.store_report`: the account's lock, quotas and
    writes, as the single route; the scope was the bearer check's), in order. Refused lines count toward `allowance`; once it is spent, the lines
    after are answered 429 untried, as are lines not begun within BATCH_SECONDS of the batch's start (`timed`; the
    CLI has no client waiting) or after a dependency failed. After a line's quota or rate 429 the lines it applies
    to (the per-repository minute: that repository's; any other limit: all) get it untried, with no transaction:
    their transactions would each lock the account row and insert a scan only to roll back."""
    left = None if allowance is None else await ratelimit.left(allowance.window, allowance.subject)
    answers: list[BatchLine] = []
    refused = 0
    deadline = batch.started + BATCH_SECONDS
    outage: ServiceUnavailable | None = None
    limited: dict[tuple[str, str, str] | None, RateLimited] = {}  # by repository; None: the whole account's
    tried = False
    for item in batch.lines:
        number = item.line
        if left is not None and refused >= left[0] and not (isinstance(item, BatchLine) and item.status == 429):
            assert allowance is not None
            message = allowance.window.message.format(limit=allowance.window.limit)
            answers.append(
                BatchLine(
                    line=number,
                    status=429,
                    errors={"rate_limit": [f"not tried: {message}"]},
                    retry_after=max(1, left[1]),
                )
            )
            continue
        if isinstance(item, BatchLine):
            answer = item
        elif outage is not None:
            answer = _refusal(number, outage)
        elif (limit := limited.get(None) or limited.get(item.ref)) is not None:
            answer = _untried(number, limit)
        elif timed and tried and time.monotonic() > deadline:  # the first line is always tried, as above
            answer = _cut(
                number,
                "budget",
                f"not stored: the request's time ({BATCH_SECONDS:g} s) ran out before this line; send it again",
            )
        else:
            answer, stop = await _store(account, item, token_id)
            if isinstance(stop, RateLimited):
                limited[item.ref if isinstance(stop, RepositoryRateLimited) else None] = stop
            else:
                outage = stop
            tried = True
        if refused_status(answer.status):
            refused += 1
        answers.append(answer)
    if allowance is not None and refused:
        await ratelimit.count(allowance.window, allowance.subject, refused)
    return answers


async def _store(
    account: Account, item: Prepared, token_id: int | None
) -> tuple[BatchLine, ServiceUnavailable | RateLimited | None]:
    """The line's answer, and what stops the lines after it: an outage, or a quota or rate limit reached."""
    try:
        report, created = await service.store_report(
            account, item.host, item.owner, item.name, item.report, token_id=token_id
        )
    except Unauthorized:  # the request's token was revoked meanwhile: the bearer check's answer, for the request
        raise
    except RateLimited as exc:
        return _refusal(item.line, exc), exc
    except DomainError as exc:
        return _refusal(item.line, exc), None
    except outages.OUTAGE_ERRORS as exc:
        dependency = outages.dependency_of(exc)
        if dependency is None:
            raise
        outages.record(dependency, exc, source="batch")
        outage = ServiceUnavailable({dependency: ["is unavailable: this line and the rest were not stored"]})
        return _refusal(item.line, outage), outage
    return BatchLine(line=item.line, status=201 if created else 200, report=report), None


def encode_lines(answers: Sequence[BatchLine]) -> bytes:
    """The answer body: one JSON object a line, each line ended by a newline."""
    return b"".join(encode(answer) + b"\n" for answer in answers)
