"""Repository references: the one parser of `HOST/OWNER/NAME` and the one normalization of its parts."""

from __future__ import annotations

from app.kernel.errors import ValidationError

# Short host names people type, and the host each stands for.
HOST_ALIASES = {"github": "github.com", "tarakan": "tarakan.lol"}
REF_FORMAT = "HOST/OWNER/NAME"
REF_EXAMPLE = "github.com/acme/widget"


def normalize_host(raw: str) -> str:
    host = raw.strip().lower()
    return HOST_ALIASES.get(host, host)


def normalize_ref(host: str, owner: str, name: str) -> tuple[str, str, str]:
    """(host, owner, name) as stored: trimmed, lowercased, the host alias resolved."""
    return normalize_host(host), owner.strip().lower(), name.strip().lower()


def parse_ref(raw: str) -> tuple[str, str, str]:
    """`HOST/OWNER/NAME` (leading and trailing slashes ignored) -> normalized (host, owner, name), or a
    ValidationError on the `repository` field."""
    parts = raw.strip().strip("/").split("/")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise ValidationError({"repository": [f"must be {REF_FORMAT} (e.g. {REF_EXAMPLE}), got {raw!r}"]})
    return normalize_ref(*parts)


def ref_slug(host: str, owner: str, name: str) -> str:
    return f"{host}/{owner}/{name}"
