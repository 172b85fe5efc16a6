"""The forge fetch's bounds (docs/security.md "Forge fetch"): where the file is fetched from, no redirect followed,
at most 4 KiB read, https only off loopback, a deadline, and the constant-time line match."""

from __future__ import annotations

import logging
import threading
import time

import httpx
import pytest

from app.accounts.service import create_token
from app.kernel import config
from app.kernel.config import ConfigError, check_forge_settings, forge_raw_url_template
from app.maintainers import forge as fetcher
from app.maintainers import recheck
from tests import factories
from tests.maintainers.support import Answer, Forge
from tests.sql import scalar

TOKEN = "tarakan-verify-abc"


FORGE_SETTINGS = ("FORGE_GITHUB_RAW_URL", "FORGE_GITLAB_URL", "FORGE_CODEBERG_URL", "FORGE_TARAKAN_URL")


def test_where_the_file_is_fetched_from(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*FORGE_SETTINGS, "FORGE_RAW_URL_TEMPLATE"):
        monkeypatch.delenv(name, raising=False)
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
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert fetcher.raw_url("codeberg.org", "acme", "widget", "a.txt", ref=sha) == (
        f"https://codeberg.org/acme/widget/raw/commit/{sha}/a.txt"
    )
    with pytest.raises(fetcher.NoForge):
        fetcher.raw_url("tarakan.lol", "acme", "widget")  # its forge has no public default
    # a base keeps its path (no urljoin) and loses a trailing slash; each value is percent-encoded per segment
    monkeypatch.setenv("FORGE_GITHUB_RAW_URL", "https://mirror.example/raw/gh/")
    assert fetcher.raw_url("github.com", "a.b", "c_d", "dir/with space/x?.txt") == (
        "https://mirror.example/raw/gh/a.b/c_d/HEAD/dir/with%20space/x%3F.txt"
    )
    monkeypatch.setenv("FORGE_GITLAB_URL", "https://git.example/gl")
    assert fetcher.raw_url("gitlab.com", "a", "b") == "https://git.example/gl/a/b/-/raw/HEAD/.tarakan/verify.txt"
    # the template serves tarakan.lol only, and FORGE_TARAKAN_URL wins over it
    monkeypatch.setenv("FORGE_RAW_URL_TEMPLATE", "https://mirror.example/{host}/{owner}/{name}/raw/{path}")
    assert fetcher.raw_url("tarakan.lol", "a", "b") == "https://mirror.example/tarakan.lol/a/b/raw/.tarakan/verify.txt"
    assert fetcher.raw_url("codeberg.org", "a", "b") == "https://codeberg.org/a/b/raw/branch/HEAD/.tarakan/verify.txt"
    monkeypatch.setenv("FORGE_TARAKAN_URL", "https://forge.tarakan.example/git")
    assert fetcher.raw_url("tarakan.lol", "a", "b") == (
        "https://forge.tarakan.example/git/a/b/raw/branch/HEAD/.tarakan/verify.txt"
    )
    for bad in ("https://x/{host}/{branch}", "https://x/{0}", "https://x/{path!r}", "ftp://x/{path}", "https://x/{"):
        monkeypatch.setenv("FORGE_RAW_URL_TEMPLATE", bad)
        with pytest.raises(ConfigError):
            forge_raw_url_template()
    monkeypatch.delenv("FORGE_RAW_URL_TEMPLATE")
    # plain http only to a loopback base; a base is a URL, not a template
    for bad in ("http://forge.example", "ftp://forge.example", "https://x/{owner}", "https://x/a?b=1", "forge"):
        monkeypatch.setenv("FORGE_CODEBERG_URL", bad)
        with pytest.raises(ConfigError, match="FORGE_CODEBERG_URL"):
            check_forge_settings()
    monkeypatch.setenv("FORGE_CODEBERG_URL", "http://127.0.0.1:8080/cb")
    check_forge_settings()


def test_the_template_is_ignored_off_tarakan_lol_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FORGE_RAW_URL_TEMPLATE", "http://127.0.0.1:9/{host}/{owner}/{name}/{path}")
    monkeypatch.setattr(config, "_template_warned", False)
    with caplog.at_level(logging.WARNING, logger="tarakan.config"):
        check_forge_settings()  # what `serve` and `worker` do at start
        check_forge_settings()
        fetcher.raw_url("tarakan.lol", "a", "b")
    warnings = [r.getMessage() for r in caplog.records if "FORGE_RAW_URL_TEMPLATE" in r.getMessage()]
    assert len(warnings) == 1 and "tarakan.lol only" in warnings[0] and "FORGE_GITHUB_RAW_URL" in warnings[0]


async def test_a_base_set_for_one_host_never_serves_another_hosts_claim(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: with FORGE_RAW_URL_TEMPLATE set, a github.com claim was proved by a file at the template's URL on
    another forge. Now every host reads only its own base: the token served everywhere else proves nothing."""
    github, elsewhere = Forge(), Forge()
    for served in (github, elsewhere):
        threading.Thread(target=served.server.serve_forever, daemon=True).start()
    try:
        github.serve_hosts(monkeypatch, "github.com")
        elsewhere.serve_hosts(monkeypatch, "gitlab.com", "codeberg.org", "tarakan.lol")
        monkeypatch.setenv(
            "FORGE_RAW_URL_TEMPLATE", f"http://127.0.0.1:{elsewhere.port}/{{host}}/{{owner}}/{{name}}/{{path}}"
        )
        await factories.create_repository("tidewater", "harbor-api", host="github.com")
        account = await factories.create_account()
        headers = {"Authorization": "Bearer " + await create_token(account.id, ["repositories:maintain"])}
        made = await client.post("/api/v1/repos/github.com/tidewater/harbor-api/claims", headers=headers)
        assert made.status_code == 201, made.text
        claim = made.json()["claim"]
        # the token wherever another host's setting (or the template) would look for it
        template_path = f"/github.com/tidewater/harbor-api/{fetcher.VERIFY_PATH}"
        elsewhere.answers[template_path] = Answer(200, claim["token"].encode())
        for host in ("gitlab.com", "codeberg.org", "tarakan.lol"):
            for path in (
                elsewhere.path_of(host, "tidewater", "harbor-api"),
                elsewhere.path_of("github.com", "tidewater", "harbor-api"),
            ):
                elsewhere.answers[path] = Answer(200, claim["token"].encode())
        refused = await client.post(f"/api/v1/claims/{claim['id']}/verify", headers=headers, json={})
        assert refused.status_code == 422 and "token" in refused.json()["errors"], refused.text
        assert elsewhere.asked == []  # the other forge was never asked
        assert github.asked == [github.path_of("github.com", "tidewater", "harbor-api")]
        assert await scalar("SELECT count(*) FROM repository_maintainers") == 0
        # the repository's own forge proves it
        github.serve_file("github.com", "tidewater", "harbor-api", claim["token"])
        verified = await client.post(f"/api/v1/claims/{claim['id']}/verify", headers=headers, json={})
        assert verified.status_code == 200 and verified.json()["claim"]["state"] == "verified", verified.text
        # the daily recheck reads the same per-host URL
        assert await recheck.recheck_maintainers() == []
        assert elsewhere.asked == []
        assert github.asked[-1] == github.path_of("github.com", "tidewater", "harbor-api")
    finally:
        for served in (github, elsewhere):
            served.server.shutdown()
            served.server.server_close()


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
