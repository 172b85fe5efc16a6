"""The content anchor's worked vectors (docs/forge.md "Lines"): what a finding's cited lines are, as evidence."""

from __future__ import annotations

import hashlib

from app.forge.lines import anchor, find, line_count, line_digests

V1 = "sha256:eb245c75c2c9fca47fb895e1871c6c5003d5ce510925c5c1a83ce02d0c237ac7"
V2 = "sha256:116c0f3ec7b381871b962d793e7c93ba82ec2c0d78310a0e2c3b6f23751996d7"


def test_vector_1_plain_lines() -> None:
    digests = line_digests(b"def f(x):\n    return x + 1\n")
    assert line_count(digests) == 2  # a trailing newline adds no empty line
    assert anchor(digests, 1, 2) == V1
    assert anchor(digests, 1, 3) is None and anchor(digests, 0, 1) is None  # not inside the file


def test_vector_2_whitespace_crlf_and_blank_lines() -> None:
    digests = line_digests(b"  a = 1\r\n\r\n\tb = 2  \nc = 3")
    assert line_count(digests) == 4  # `\r\n` counts once; a last line without a newline counts
    assert anchor(digests, 1, 3) == V2  # stripped of ASCII whitespace, the blank line dropped
    lines = hashlib.sha256(b"a = 1").digest() + hashlib.sha256(b"b = 2").digest()
    assert "sha256:" + hashlib.sha256(lines).hexdigest() == V2
    assert anchor(digests, 2, 2) is None  # all blank
    assert anchor(line_digests(b"a = 1\n\xc2\xa0b = 2\n"), 1, 2) != V2  # a non-breaking space is content


def test_vector_3_moved_lines_are_found() -> None:
    moved = line_digests(b"x = 0\na = 1\n\nb = 2\n")
    assert anchor(moved, 2, 4) == V2
    assert find(moved, V2, 2) == (2, 4)  # two non-blank lines, at 2..4 now
    assert find(moved, V2, 3) is None and find(moved, V1, 2) is None
    assert find(line_digests(b""), V2, 2) is None
