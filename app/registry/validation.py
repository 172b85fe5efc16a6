"""Which hosts, owners and names a repository may have, judged on the parts `app.kernel.refs` normalized (docs/domain.md
§1.1)."""

from __future__ import annotations

import re

from app.kernel.errors import ValidationError
from app.kernel.refs import normalize_host

ALLOWED_HOSTS = ("github.com", "gitlab.com", "codeberg.org", "tarakan.lol")
OWNER_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,37}[a-z0-9])?$")
NAME_RE = re.compile(r"^[a-z0-9._-]+$")
NAME_MAX = 100


def _string(field: str, raw: object, errors: dict[str, list[str]]) -> str | None:
    if raw is None:
        errors[field] = ["is required"]
        return None
    if not isinstance(raw, str):
        errors[field] = ["must be a string"]
        return None
    value = raw.strip().lower()
    if not value:
        errors[field] = ["is required"]
        return None
    return value


def validate_repo_ref(host: object, owner: object, name: object) -> tuple[str, str, str]:
    """Normalized (host, owner, name), or a ValidationError naming every bad field."""
    errors: dict[str, list[str]] = {}
    h = _string("host", host, errors)
    h = None if h is None else normalize_host(h)
    o = _string("owner", owner, errors)
    n = _string("name", name, errors)
    if h is not None and h not in ALLOWED_HOSTS:
        errors["host"] = [f"must be one of {', '.join(ALLOWED_HOSTS)}"]
    if o is not None and not OWNER_RE.match(o):
        errors["owner"] = ["must be 1-39 characters of a-z, 0-9 or '-', not starting or ending with '-'"]
    if n is not None:
        if len(n) > NAME_MAX:
            errors["name"] = [f"must be at most {NAME_MAX} characters"]
        elif n in (".", "..") or not NAME_RE.match(n):
            errors["name"] = ["must use only a-z, 0-9, '.', '_' or '-' and not be '.' or '..'"]
    if errors or h is None or o is None or n is None:
        raise ValidationError(errors)
    return h, o, n


def canonical_url(host: str, owner: str, name: str) -> str:
    return f"https://{host}/{owner}/{name}"
