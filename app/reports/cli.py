"""`tarakan reports submit HOST/OWNER/NAME FILE --as EMAIL [--commit SHA]` and `tarakan reports submit-batch FILE --as
EMAIL`: the same services as the API, acting as an account. FILE holds a Scan Format v1 request body or a SARIF 2.1.0
log (recognised by its content); a batch FILE one report a line (NDJSON, docs/domain.md §9 "Batches")."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any
from urllib.parse import unquote, urlsplit

from app.accounts.service import require_account_by_email
from app.kernel.answers import UnsetType, as_json
from app.kernel.cli import command, group
from app.kernel.errors import ValidationError
from app.kernel.refs import parse_ref
from app.reports.sarif import is_sarif, sarif_to_report


def read_bytes(path: str) -> bytes:
    """FILE's bytes; `-` reads stdin."""
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ValidationError({"file": [f"cannot be read ({exc.__class__.__name__})"]}) from None


def read_body(path: str) -> dict[str, Any]:
    """FILE holds the API request body; `-` reads it from stdin."""
    try:
        if path == "-":
            raw = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as handle:
                raw = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError({"file": [f"cannot be read ({exc.__class__.__name__})"]}) from None
    try:
        body = json.loads(raw)
    except ValueError:
        raise ValidationError({"file": ["must hold valid JSON"]}) from None
    if not isinstance(body, dict):
        raise ValidationError({"file": ["must hold a JSON object"]})
    return body


async def _submit(args: argparse.Namespace) -> int:
    from app.reports.service import submit_report

    host, owner, name = parse_ref(args.repository)
    body = read_body(args.file)
    sarif_report = None
    if is_sarif(body):  # by content, not by name (docs/sarif.md)
        sarif_report = sarif_to_report(body, commit_sha=args.commit, source_root=_source_root(args, body))
        body = sarif_report.body
    elif args.commit is not None or args.source_root is not None:
        option = "--commit" if args.commit is not None else "--source-root"
        raise ValidationError({option: ["applies to a SARIF log only (a Scan Format v1 body names its own paths)"]})
    account = await require_account_by_email(args.as_email)
    result = await submit_report(account, host, owner, name, body)
    if sarif_report is not None:
        result = result | {"sarif": as_json(sarif_report.summary())}
    print(json.dumps(result, indent=2))
    return 0


async def _submit_batch(args: argparse.Namespace) -> int:
    """Every line stored or refused as `POST /api/v1/reports/batch` would (acting as the account, no token): a
    summary, then each line that was not stored; exit status 1 when any line was not."""
    from app.kernel.intake import Body, off_loop
    from app.reports.batch import BATCH_MEDIA_TYPE, parse_batch, store_batch

    body = Body(read_bytes(args.file), BATCH_MEDIA_TYPE, {})
    account = await require_account_by_email(args.as_email)
    batch = await off_loop(lambda budget: parse_batch(body, budget))
    answers = await store_batch(account, batch, timed=False)
    stored = sum(1 for a in answers if a.status == 201)
    again = sum(1 for a in answers if a.status == 200)
    failed = [a for a in answers if a.status >= 400]
    findings = sum(a.report.findings_count for a in answers if a.status == 201 and not isinstance(a.report, UnsetType))
    print(
        f"{len(answers)} lines: {stored} stored ({findings} findings), {again} already stored (a retry of the same "
        f"run), {len(failed)} not stored"
    )
    for answer in failed:
        errors = (
            ""
            if isinstance(answer.errors, UnsetType)
            else "; ".join(f"{field}: {', '.join(messages)}" for field, messages in answer.errors.items())
        )
        print(f"line {answer.line}: {answer.status} {errors}")
    return 1 if failed else 0


def _source_root(args: argparse.Namespace, log: dict[str, Any]) -> str | None:
    """`--source-root`, else the working directory when every `file:` URI of the log lies under it."""
    if args.source_root is not None:
        return str(os.path.abspath(args.source_root))
    here = os.getcwd().rstrip("/") + "/"
    uris = [uri for uri in _strings_named(log, "uri") if uri.startswith("file:")]
    if uris and all(unquote(urlsplit(uri).path).startswith(here) for uri in uris):
        return here
    return None


def _strings_named(value: Any, key: str) -> list[str]:
    """Every string stored under `key` anywhere in `value` (iteratively: a log may be deep)."""
    found: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.extend(v for k, v in item.items() if k == key and isinstance(v, str))
            stack.extend(v for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
    return found


def register(sub: Any) -> None:
    """Add `reports submit` and `reports submit-batch` to the `tarakan` parser."""
    reports_sub = group(sub, "reports", "submit reports", metavar="COMMAND")
    submit = command(
        reports_sub, "submit", _submit, "submit a report (FILE: a request body or a SARIF 2.1.0 log, - for stdin)"
    )
    submit.add_argument("repository", metavar="HOST/OWNER/NAME")
    submit.add_argument("file", metavar="FILE")
    submit.add_argument("--as", dest="as_email", required=True, metavar="EMAIL")
    submit.add_argument("--commit", metavar="SHA", help="the commit of a SARIF log that does not name one")
    submit.add_argument(
        "--source-root",
        metavar="DIR",
        help="the checkout a SARIF log's absolute file: URIs lie under (default: the working directory, when they all do)",
    )
    batch = command(
        reports_sub,
        "submit-batch",
        _submit_batch,
        'submit many reports (FILE: NDJSON, one report body with its "repository": "HOST/OWNER/NAME" a line, '
        "at most 500; - for stdin); exit status 1 when any line was not stored",
    )
    batch.add_argument("file", metavar="FILE")
    batch.add_argument("--as", dest="as_email", required=True, metavar="EMAIL")
