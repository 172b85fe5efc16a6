"""The forge fetch's bounds (docs/security.md "Forge fetch"): where the file is fetched from, no redirect followed,
at most 4 KiB read, https only off loopback, a deadline, and the constant-time line match."""

from __future__ import annotations

import time

import pytest

from app.kernel.config import ConfigError, forge_raw_url_template
from app.maintainers import forge as fetcher
from tests.maintainers.support import Answer, Forge

TOKEN = "tarakan-verify-abc"


def test_where_the_file_is_fetched_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORGE_RAW_URL_TEMPLATE", raising=False)
    assert fetcher.raw_url("github.com", "acme", "widget") == (
        "https://raw.githubusercontent.com/acme/widget/HEAD/.tarakan/verify.txt"
    )
    assert (
        fetcher.raw_url("gitlab.com", "acme", "widget")
        == "https://gitlab.com/acme/widget/-/raw/HEAD/.tarakan/verify.txt"
    )
    assert fetcher.raw_url("codeberg.org", "acme", "widget") == (
        "https://codeberg.org/acme/widget/raw/branch/HEAD/.tarakan/verify.txt"
    )
    with pytest.raises(fetcher.NoForge):
        fetcher.raw_url("tarakan.lol", "acme", "widget")  # its forge is out of scope: the template is needed
    # the template overrides every default; each value is percent-encoded per path segment
    monkeypatch.setenv("FORGE_RAW_URL_TEMPLATE", "https://mirror.example/{host}/{owner}/{name}/raw/{path}")
    assert fetcher.raw_url("tarakan.lol", "a.b", "c_d", "dir/with space/x?.txt") == (
        "https://mirror.example/tarakan.lol/a.b/c_d/raw/dir/with%20space/x%3F.txt"
    )
    for bad in ("https://x/{host}/{branch}", "https://x/{0}", "https://x/{path!r}", "ftp://x/{path}", "https://x/{"):
        monkeypatch.setenv("FORGE_RAW_URL_TEMPLATE", bad)
        with pytest.raises(ConfigError):
            forge_raw_url_template()


def test_a_line_equal_to_the_token_verifies() -> None:
    found = fetcher.Fetched("found", "forge", text=f"# comment\r\n\t{TOKEN}  \nother\n")
    assert found.holds(TOKEN)
    assert not found.holds(TOKEN + "x") and not found.holds("tarakan-verify-ab")
    assert not fetcher.Fetched("found", "forge", text=f"prefix {TOKEN}").holds(TOKEN)
    assert not fetcher.Fetched("missing", "forge", text=TOKEN).holds(TOKEN)


async def test_redirects_are_not_followed(forge: Forge) -> None:
    forge.answers["/moved"] = Answer(302, headers={"Location": "/target"})
    forge.answers["/target"] = Answer(200, TOKEN.encode())
    fetched = await forge_fetch(forge, "/moved")
    assert fetched.outcome == "refused" and "redirect" in fetched.detail
    assert forge.asked == ["/moved"]


async def test_at_most_4_kib_is_read(forge: Forge) -> None:
    forge.answers["/endless"] = Answer(200, endless=True)
    started = time.monotonic()
    fetched = await forge_fetch(forge, "/endless")
    assert fetched.outcome == "found" and len(fetched.text) == fetcher.MAX_BYTES
    assert time.monotonic() - started < 3
    # a token past the first 4 KiB is not seen
    forge.answers["/late"] = Answer(200, b"#" * 5000 + b"\n" + TOKEN.encode())
    assert not (await forge_fetch(forge, "/late")).holds(TOKEN)
    forge.answers["/early"] = Answer(200, TOKEN.encode() + b"\n" + b"#" * 100_000)
    assert (await forge_fetch(forge, "/early")).holds(TOKEN)


async def test_failures_are_the_forges_and_http_is_for_loopback_only(
    forge: Forge, monkeypatch: pytest.MonkeyPatch
) -> None:
    for status in (500, 502, 503, 429):
        forge.answers["/x"] = Answer(status)
        assert (await forge_fetch(forge, "/x")).outcome == "failed"
    for status in (404, 410):
        forge.answers["/x"] = Answer(status)
        assert (await forge_fetch(forge, "/x")).outcome == "missing"
    forge.answers["/x"] = Answer(403)
    assert (await forge_fetch(forge, "/x")).outcome == "refused"
    forge.answers["/x"] = Answer(200, b"\x1f\x8b...", headers={"Content-Encoding": "gzip"})
    assert (await forge_fetch(forge, "/x")).outcome == "failed"  # never decompressed
    monkeypatch.setattr(fetcher, "READ_SECONDS", 0.2)
    forge.answers["/slow"] = Answer(200, TOKEN.encode(), delay=1.0)
    slow = await forge_fetch(forge, "/slow")
    assert slow.outcome == "failed" and "in time" in slow.detail
    closed = await fetcher.fetch("http://127.0.0.1:9/.tarakan/verify.txt")
    assert closed.outcome == "failed"
    plain = await fetcher.fetch("http://forge.example/.tarakan/verify.txt")  # refused before any connection
    assert plain.outcome == "refused" and "https" in plain.detail


async def forge_fetch(served: Forge, path: str) -> fetcher.Fetched:
    return await fetcher.fetch(f"http://127.0.0.1:{served.port}{path}")
