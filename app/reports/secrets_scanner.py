"""Refuse reports and checks that carry live credentials (docs/domain.md §9). Errors name the field and the kind of
secret, never the secret itself: the error body is echoed to logs and terminals."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from app.kernel.errors import ValidationError

PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("a Stripe live key", re.compile(r"\bsk_live_[0-9A-Za-z]{16,}")),
    ("a JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    (
        "a credential assignment",
        re.compile(
            r"(?i)\b(?:api_key|secret_key|access_token|private_key)\b[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9_\-+/=.]{24,}"
        ),
    ),
)


def find_secret(text: str) -> str | None:
    """The kind of the first secret found in `text`, or None."""
    for kind, pattern in PATTERNS:
        if pattern.search(text):
            return kind
    return None


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key, path)
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def _field_for(document_path: str) -> str:
    # findings are named like the validator names them (`findings[3].description`); the rest lives under document
    return document_path if document_path.startswith("findings[") else f"document.{document_path}".rstrip(".")


def scan_fields(fields: dict[str, Any]) -> None:
    """Raise a 422 naming the first field (per field, the first path inside it) that carries a secret.

    `fields` maps a field name to its value; the value `document` is walked recursively."""
    errors: dict[str, list[str]] = {}
    for name, value in fields.items():
        if value is None:
            continue
        for path, text in _strings(value, "" if name == "document" else name):
            kind = find_secret(text)
            if kind is not None:
                field = _field_for(path) if name == "document" else name
                errors[field] = [f"must not contain secrets (found what looks like {kind}; remove or redact it)"]
                break
    if errors:
        raise ValidationError(errors)
