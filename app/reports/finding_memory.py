"""Finding memory keys, exactly as the original (docs/domain.md §2.1-2.3): title normalization, pattern key, fingerprint."""

from __future__ import annotations

import hashlib

import regex

_PREFIX = regex.compile(
    r"^(?:verified|hypothesis(?:/low)?|unverified|likely|possible|confirmed|warning|error|critical|high|medium|low"
    r"|info|cwe[-\s]?\d+)\s*:\s*",
    regex.IGNORECASE,
)
_NOT_KEPT = regex.compile(r"[^\p{L}\p{N}\s/._-]")
_SPACES = regex.compile(r"\s+")
_LEGACY_PREFIX = regex.compile(
    r"^(?:verified|hypothesis(?:/low)?|unverified|likely|possible|confirmed)\s*:\s*", regex.IGNORECASE
)

EMPTY_PATTERN_KEY = hashlib.sha256(b"").hexdigest()


def _lower(value: str) -> str:
    # Elixir's String.downcase has no final-sigma rule, Python's str.lower does (its only context-dependent
    # mapping): a title with a capital sigma goes character by character, any other at C speed
    if "\u03a3" not in value:
        return value.lower()
    return "".join(c.lower() for c in value)


def normalize_title(title: object) -> str:
    """v2 normalization (docs/domain.md §2.1); the order of the steps matters."""
    text = _lower(title if isinstance(title, str) else ("" if title is None else str(title)))
    while True:
        stripped = _PREFIX.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    text = _NOT_KEPT.sub(" ", text)
    text = _SPACES.sub(" ", text).strip()
    return text.rstrip(".")


def legacy_normalize(title: object) -> str:
    """v1 normalization, only used to find canonicals keyed by the legacy fingerprint."""
    text = _lower(title if isinstance(title, str) else "")
    text = _LEGACY_PREFIX.sub("", text, count=1)
    text = _NOT_KEPT.sub(" ", text)
    return _SPACES.sub(" ", text).strip()


def pattern_key(title: object) -> str:
    """sha256 hex of the normalized title; a non-string title counts as ""."""
    return hashlib.sha256(normalize_title(title if isinstance(title, str) else "").encode()).hexdigest()


def fingerprint_path(path: object) -> str:
    """Path form used for fingerprints: canonicalized, lowercased; any `..` makes it ""."""
    if not isinstance(path, str):
        return ""
    segments = [s for s in path.strip().replace("\\", "/").split("/") if s not in ("", ".")]
    if ".." in segments:
        return ""
    return _lower("/".join(segments))


def _line(line_start: int | None) -> str:
    return "" if line_start is None else str(line_start)


def fingerprint(file_path: object, line_start: int | None, title: object) -> str:
    """v2 fingerprint: path, line_start and normalized title joined by 0x1F (line_end deliberately ignored)."""
    raw = f"{fingerprint_path(file_path)}\x1f{_line(line_start)}\x1f{normalize_title(title)}"
    return hashlib.sha256(raw.encode()).hexdigest()


def legacy_fingerprint(file_path: object, line_start: int | None, line_end: int | None, title: object) -> str:
    raw = "\x1f".join(
        [
            legacy_normalize(file_path),
            _line(line_start),
            "" if line_end is None else str(line_end),
            legacy_normalize(title),
        ]
    )
    return hashlib.sha256(raw.encode()).hexdigest()
