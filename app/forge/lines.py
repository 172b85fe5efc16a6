"""What a file's lines say, as evidence (docs/forge.md "Lines"): a digest per line, so any range's content anchor is
computed from the cache without the file, and the search of an anchor elsewhere in a file ("moved"). Pure."""

from __future__ import annotations

import hashlib

DIGEST = 32
_WHITESPACE = b" \t\r\n\x0b\x0c"  # ASCII only: a non-breaking space is content
BLANK = hashlib.sha256(b"").digest()  # a line of whitespace only


def line_digests(data: bytes) -> bytes:
    """sha256 of each line, stripped of ASCII whitespace, concatenated (32 bytes a line). Lines split on `\\n`: a
    `\\r\\n` counts once, a last line without a newline counts, a trailing newline adds no empty line."""
    if not data:
        return b""
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return b"".join(hashlib.sha256(line.strip(_WHITESPACE)).digest() for line in lines)


def line_count(digests: bytes) -> int:
    return len(digests) // DIGEST


def _line(digests: bytes, number: int) -> bytes:
    return digests[(number - 1) * DIGEST : number * DIGEST]


def _anchor_of(kept: list[bytes]) -> str:
    return "sha256:" + hashlib.sha256(b"".join(kept)).hexdigest()


def anchor(digests: bytes, line_start: int, line_end: int) -> str | None:
    """The content anchor of lines line_start..line_end (1-based, inclusive): sha256 over the digests of its
    non-blank lines; None when the range is all blank or not inside the file."""
    if line_start < 1 or line_end < line_start or line_end > line_count(digests):
        return None
    kept = [d for d in (_line(digests, n) for n in range(line_start, line_end + 1)) if d != BLANK]
    return _anchor_of(kept) if kept else None


def find(digests: bytes, wanted: str, lines_wanted: int) -> tuple[int, int] | None:
    """The first window of exactly `lines_wanted` non-blank lines whose anchor is `wanted`: (its first line, its
    last line), blank lines inside the window included in the span; None when the file has no such window."""
    if lines_wanted < 1:
        return None
    numbered = [(n, d) for n in range(1, line_count(digests) + 1) if (d := _line(digests, n)) != BLANK]
    for first in range(len(numbered) - lines_wanted + 1):
        window = numbered[first : first + lines_wanted]
        if _anchor_of([d for _, d in window]) == wanted:
            return window[0][0], window[-1][0]
    return None
