"""Form plumbing: text fields from a form body, safe local redirects, query strings."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from starlette.datastructures import FormData

MAX_FIELD = 8000


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
