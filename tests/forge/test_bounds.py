"""Every forge request is bounded (docs/forge.md "Bounds"): the forge's own "stop until" is obeyed by every caller,
the per-host rate is shared and waited for only until the caller's deadline, no redirect is followed, a file is
read only to the cap, no private address is asked, and a token goes only to its own forge's API."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import REGISTRY

from app.forge import api
from app.forge.demo import DemoForge
from app.kernel.config import ConfigError, check_forge_settings

SHA = "a" * 40


def repo(forge: DemoForge, host: str = "github.com", files: dict[str, bytes] | None = None) -> None:
    forge.add_repository(host, "acme", "widget")
    forge.add_commit(host, "acme", "widget", SHA, files or {"a.py": b"x = 1\n"})


async def test_a_forge_that_said_stop_is_not_asked_until_it_said(forge: DemoForge) -> None:
    repo(forge)
    forge.rate_limit("github.com", reset=time.time() + 2)  # 403, X-RateLimit-Remaining: 0, X-RateLimit-Reset
    spent = await api.commit("github.com", "acme", "widget", SHA)
    assert spent.outcome == "failed" and spent.status == 403
    asked = len(forge.requests("github.com"))
    for _ in range(3):  # every caller of this host's API is told at once, the forge is not asked
        stopped = await api.repository("github.com", "acme", "widget")
        assert stopped.outcome == "failed" and "no request before" in stopped.detail and stopped.status == 0
    assert len(forge.requests("github.com")) == asked
    raw = await api.raw_file("github.com", "acme", "widget", SHA, "a.py")  # raw files are served apart
    assert raw.outcome == "found"
    assert (await api.repository("gitlab.com", "acme", "widget")).outcome == "missing"  # another host is asked
    await asyncio.sleep(2.1)
    assert (await api.commit("github.com", "acme", "widget", SHA)).outcome == "found"


async def test_retry_after_is_obeyed(forge: DemoForge) -> None:
    repo(forge)
    forge.rate_limit("github.com", reset=time.time() + 60, retry_after=1)  # a 429 with Retry-After: 1
    assert (await api.commit("github.com", "acme", "widget", SHA)).outcome == "failed"
    forge.up()
    forge.rate_limit("github.com", reset=0)  # the forge would answer again: we wait what it said anyway
    assert (await api.commit("github.com", "acme", "widget", SHA)).outcome == "failed"
    assert len(forge.requests("github.com")) == 1
    await asyncio.sleep(1.1)
    assert (await api.commit("github.com", "acme", "widget", SHA)).outcome == "found"


async def test_the_rate_is_shared_and_waited_for_until_the_deadline(
    forge: DemoForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo(forge)
    monkeypatch.setenv("FORGE_BURST", "4")
    monkeypatch.setenv("FORGE_REQUESTS_PER_SECOND", "10")

    async def caller() -> list[str]:
        return [(await api.commit("github.com", "acme", "widget", SHA)).outcome for _ in range(4)]

    started = time.monotonic()
    outcomes = await asyncio.gather(caller(), caller())  # two callers, one bucket: 4 at once, then 10 a second
    elapsed = time.monotonic() - started
    assert list(outcomes) == [["found"] * 4] * 2
    assert elapsed >= 0.35, elapsed  # the 4 past the burst waited about 0.1 s each
    # the bucket is empty: a caller whose deadline comes before the next token answers "rate" without asking
    monkeypatch.setenv("FORGE_REQUESTS_PER_SECOND", "1")
    asked = len(forge.requests("github.com"))
    late = await api.commit("github.com", "acme", "widget", SHA, deadline=time.monotonic() + 0.3)
    assert late.outcome == "failed" and "rate" in late.detail
    assert len(forge.requests("github.com")) == asked
    assert (await api.commit("gitlab.com", "acme", "widget", SHA)).outcome == "missing"  # its own bucket


async def test_no_redirect_is_followed(forge: DemoForge) -> None:
    repo(forge, files={"a.py": b"x", "b.py": b"y"})
    forge.redirects[f"/raw/acme/widget/{SHA}/a.py"] = f"/github.com/raw/acme/widget/{SHA}/b.py"
    answer = await api.raw_file("github.com", "acme", "widget", SHA, "a.py")
    assert answer.outcome == "refused" and answer.status == 302 and "not followed" in answer.detail
    assert [a.path for a in forge.requests("github.com")] == [f"/raw/acme/widget/{SHA}/a.py"]


async def test_a_file_over_the_cap_is_read_only_to_the_cap(forge: DemoForge, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORGE_MAX_FILE_BYTES", "2048")
    repo(forge, files={"big.txt": b"line\n" * 10_000, "small.txt": b"x" * 2048})
    big = await api.raw_file("github.com", "acme", "widget", SHA, "big.txt")
    assert big.outcome == "found" and big.value is not None
    assert big.value.truncated and big.value.data == (b"line\n" * 10_000)[:2048]
    small = await api.raw_file("github.com", "acme", "widget", SHA, "small.txt")
    assert small.value is not None and not small.value.truncated and len(small.value.data) == 2048


async def test_failures_are_the_forges(forge: DemoForge) -> None:
    repo(forge)
    forge.fail("github.com", 502)
    assert (await api.raw_file("github.com", "acme", "widget", SHA, "a.py")).outcome == "failed"
    forge.fail("github.com", 401)
    assert (await api.repository("github.com", "acme", "widget")).outcome == "refused"
    forge.fail("github.com", 0)
    forge.down()
    down = await api.in_history("github.com", "acme", "widget", "main", SHA)
    assert down.outcome == "failed" and down.status == 0
    forge.up()
    assert (await api.in_history("github.com", "acme", "widget", "main", SHA)).value is True


async def test_a_private_address_is_never_asked(forge: DemoForge, monkeypatch: pytest.MonkeyPatch) -> None:
    repo(forge)
    monkeypatch.setenv("FORGE_GITHUB_API_URL", "https://192.0.2.10/api")  # https, but not a public address
    monkeypatch.setenv("FORGE_GITHUB_RAW_URL", "https://192.0.2.11/raw")
    started = time.monotonic()
    for answer in (
        await api.repository("github.com", "acme", "widget"),
        await api.raw_file("github.com", "acme", "widget", SHA, "a.py"),
    ):
        assert answer.outcome == "refused" and "not a public address" in answer.detail, answer
    assert time.monotonic() - started < 1  # refused before any connection


async def test_tokens_go_only_to_their_own_api(forge: DemoForge, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORGE_GITHUB_TOKEN", "gh-secret")
    monkeypatch.setenv("FORGE_GITLAB_TOKEN", "gl-secret")
    for host in ("github.com", "gitlab.com", "codeberg.org"):
        repo(forge, host)
        await api.repository(host, "acme", "widget")
        await api.commit(host, "acme", "widget", SHA)
        assert (await api.raw_file(host, "acme", "widget", SHA, "a.py")).outcome == "found"
    for asked in forge.requests():
        sent = " ".join(asked.headers.values())
        api_request = asked.path.startswith("/api")
        assert ("gh-secret" in sent) == (asked.host == "github.com" and api_request), asked
        assert ("gl-secret" in sent) == (asked.host == "gitlab.com" and api_request), asked


async def test_requests_are_counted(forge: DemoForge) -> None:
    repo(forge)

    def count(kind: str, outcome: str) -> float:
        labels = {"host": "github.com", "kind": kind, "outcome": outcome}
        return REGISTRY.get_sample_value("tarakan_forge_requests_total", labels) or 0.0

    before = (count("raw", "found"), count("compare", "missing"), count("branch", "found"))
    await api.raw_file("github.com", "acme", "widget", SHA, "a.py")
    await api.in_history("github.com", "acme", "widget", "main", "d" * 40)
    await api.commit("github.com", "acme", "widget", "main")
    assert (count("raw", "found"), count("compare", "missing"), count("branch", "found")) == tuple(
        b + 1 for b in before
    )


def test_settings_are_checked_at_start_and_a_missing_token_is_said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EVIDENCE_CHECK", "gate")
    monkeypatch.setenv("FORGE_GITHUB_TOKEN", "t")
    with caplog.at_level(logging.WARNING, logger="tarakan.config"):
        check_forge_settings()
    said = [r.getMessage() for r in caplog.records if "no token" in r.getMessage()]
    assert len(said) == 1 and "gitlab.com, codeberg.org" in said[0] and "github.com" not in said[0]
    for name, bad in (
        ("EVIDENCE_CHECK", "maybe"),
        ("FORGE_GITHUB_API_URL", "http://api.example"),
        ("FORGE_REQUESTS_PER_SECOND", "0"),
        ("FORGE_MAX_FILE_BYTES", "ten"),
    ):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ConfigError, match=name):
            check_forge_settings()
        monkeypatch.undo()
