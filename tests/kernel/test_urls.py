"""Public paths (app.kernel.urls): a segment that needs no escaping is taken as it is, and every other one is
percent-encoded as `quote(text, safe="")` encodes it, so a repository, finding or pattern has one address."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from app.kernel.urls import finding_path, infestation_path, repo_path

EDGES = ["", "acme", "a.b-c_d~e", "a b", "a/b", "a%2Fb", "..", "ünïcode", "a?b#c", "<svg onload=x>", "\x00", "9" * 300]


def expected(*parts: str) -> list[str]:
    return [quote(part, safe="") for part in parts]


@given(st.lists(st.text(), min_size=3, max_size=3))
def test_a_segment_is_quoted_only_where_it_needs_it(parts: list[str]) -> None:
    host, owner, name = parts
    assert repo_path(host, owner, name) == "/repos/" + "/".join(expected(host, owner, name))
    assert finding_path(owner) == "/findings/" + expected(owner)[0]
    assert infestation_path(name) == "/infestations/" + expected(name)[0]


def test_edge_segments() -> None:
    for text in EDGES:
        assert repo_path(text, text, text) == "/repos/" + "/".join(expected(text, text, text))
    assert repo_path("github.com", "acme", "a b") == "/repos/github.com/acme/a%20b"
    assert finding_path("a/b") == "/findings/a%2Fb"
