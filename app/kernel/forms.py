"""Form plumbing: the limits of the site's forms (parsed by `app.kernel.intake.form_parser`), text fields from
them, safe local redirects, query strings."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from starlette.datastructures import FormData

MAX_FIELD = 8000


# The site's forms (docs/security.md): no file parts, a handful of fields, small parts. Starlette's defaults
# (1,000 files, 1,000 fields of 1 MiB) are for upload forms; none of ours is one.
@dataclass(frozen=True)
class FormLimits:
    max_fields: int
    max_part_size: int  # bytes of one field's value
    max_files: int = 0


LOGIN_FORM = FormLimits(max_fields=8, max_part_size=4 * 1024)
MODERATION_FORM = FormLimits(max_fields=16, max_part_size=16 * 1024)


def field(form: FormData, name: str) -> str:
    """A text field ('' when absent; uploads are not text). Capped so a huge field cannot be echoed back."""
    value = form.get(name)
    return value[:MAX_FIELD] if isinstance(value, str) else ""


def safe_local_path(raw: str | None, *, default: str, prefix: str = "/") -> str:
    """`raw` when it is a path on this site under `prefix`, else `default` (no open redirects: rejects
    `//host`, `/\\host`, schemes and control characters)."""
    if not raw or not raw.startswith(prefix) or raw.startswith(("//", "/\\")):
        return default
    if any(ord(c) < 0x20 or c == "\\" for c in raw):
        return default
    parts = urlsplit(raw)
    if parts.scheme or parts.netloc:
        return default
    return raw


def with_query(path: str, **params: str) -> str:
    """`path` with `params` set in its query string (replacing any earlier values of those names)."""
    parts = urlsplit(path)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    query.extend(params.items())
    return urlunsplit(("", "", parts.path, urlencode(query), ""))
