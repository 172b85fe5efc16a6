"""One repository-reference parser: `HOST/OWNER/NAME`, trimmed, lowercased, host aliases resolved."""

from __future__ import annotations

import pytest

from app.kernel.errors import ValidationError
from app.kernel.refs import normalize_ref, parse_ref
from app.registry.validation import validate_repo_ref


def test_parse_ref_normalizes_and_resolves_host_aliases() -> None:
    assert parse_ref("GitHub.com/Acme/Widget") == ("github.com", "acme", "widget")
    assert parse_ref("/github.com/acme/widget/") == ("github.com", "acme", "widget")
    assert parse_ref(" github/Acme/Widget ") == ("github.com", "acme", "widget")
    assert parse_ref("tarakan/acme/widget") == ("tarakan.lol", "acme", "widget")
    # only slashes are trimmed from the ends: a name's own last letters stay
    assert parse_ref("github.com/Acme/WidgetX/") == ("github.com", "acme", "widgetx")
    assert normalize_ref(" GITHUB ", "Acme ", " Widget") == ("github.com", "acme", "widget")


@pytest.mark.parametrize("bad", ["acme/widget", "github.com/acme/widget/extra", "", "github.com//widget"])
def test_parse_ref_names_the_repository_field(bad: str) -> None:
    with pytest.raises(ValidationError, match="HOST/OWNER/NAME") as info:
        parse_ref(bad)
    assert list(info.value.errors) == ["repository"]


def test_registration_accepts_the_same_aliases() -> None:
    assert validate_repo_ref("github", "acme", "widget") == ("github.com", "acme", "widget")
    with pytest.raises(ValidationError) as info:
        validate_repo_ref("bitbucket.org", "acme", "widget")
    assert list(info.value.errors) == ["host"]
