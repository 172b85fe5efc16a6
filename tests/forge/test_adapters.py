"""Each forge's adapter against the loopback forge (app.forge.demo), in that forge's own shapes: a repository's
metadata, a commit and a branch's head, whether a commit is in the default branch's history, and a raw file."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.forge import api
from app.forge.demo import DemoForge

OLD = "a" * 40
NEW = "b" * 40
FORK = "c" * 40
WHEN = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
HOSTS = ("github.com", "gitlab.com", "codeberg.org", "tarakan.lol")


def widget(forge: DemoForge, host: str) -> None:
    forge.add_repository(host, "acme", "widget", "trunk", 4242, "A widget", "Python", 7)
    forge.add_commit(host, "acme", "widget", OLD, {"src/app.py": b"print(1)\n"}, WHEN)
    forge.add_commit(host, "acme", "widget", NEW, {"src/app.py": b"print(2)\n", "README": b"hi"}, WHEN)
    forge.add_commit(host, "acme", "widget", FORK, {"src/app.py": b"evil\n"}, WHEN, on_default_branch=False)


@pytest.mark.parametrize("host", HOSTS)
async def test_each_forge_answers_in_its_own_shapes(forge: DemoForge, host: str) -> None:
    widget(forge, host)
    found = await api.repository(host, "acme", "widget")
    assert found.outcome == "found" and found.value is not None
    info = found.value
    assert (info.forge_id, info.full_name, info.default_branch, info.description) == (
        "4242", "acme/widget", "trunk", "A widget",
    )  # fmt: skip
    assert info.stars == 7 and not info.private and not info.archived
    assert info.language == (None if host == "gitlab.com" else "Python")  # GitLab's project answer has none
    again = await api.repository(host, "acme", "widget", etag=found.etag)
    assert found.etag and again.outcome == "not_modified"
    assert (await api.repository(host, "acme", "nothing")).outcome == "missing"

    commit = await api.commit(host, "acme", "widget", OLD)
    assert commit.outcome == "found" and commit.value == api.CommitInfo(OLD, WHEN)
    head = await api.commit(host, "acme", "widget", "trunk")
    assert head.outcome == "found" and head.value is not None and head.value.sha == NEW
    assert (await api.commit(host, "acme", "widget", "d" * 40)).outcome == "missing"
    assert (await api.commit(host, "acme", "widget", "trunk-nope")).outcome == "missing"

    assert (await api.in_history(host, "acme", "widget", "trunk", NEW)).value is True
    assert (await api.in_history(host, "acme", "widget", "trunk", OLD)).value is True
    fork = await api.in_history(host, "acme", "widget", "trunk", FORK)  # served under the name, not on its branch
    assert fork.outcome == "found" and fork.value is False
    assert (await api.in_history(host, "acme", "widget", "trunk", "d" * 40)).outcome == "missing"

    raw = await api.raw_file(host, "acme", "widget", OLD, "src/app.py")
    assert raw.outcome == "found" and raw.value == api.RawFile(b"print(1)\n", truncated=False)
    assert (await api.raw_file(host, "acme", "widget", OLD, "README")).outcome == "missing"  # not at that commit
    assert (await api.raw_file(host, "acme", "widget", "d" * 40, "README")).outcome == "missing"


async def test_github_malformed_commit_ids_are_missing(forge: DemoForge) -> None:
    widget(forge, "github.com")
    answer = await api.commit("github.com", "acme", "widget", "not-a-sha")
    assert answer.outcome == "missing" and answer.status == 422


@pytest.mark.parametrize("host", ["github.com", "gitlab.com", "codeberg.org"])
async def test_a_private_repository_is_not_found(forge: DemoForge, host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    forge.add_repository(host, "acme", "secret", private=True)
    assert (await api.repository(host, "acme", "secret")).outcome == "missing"  # anonymous: a 404
    token = {"github.com": "FORGE_GITHUB_TOKEN", "gitlab.com": "FORGE_GITLAB_TOKEN"}.get(host, "FORGE_CODEBERG_TOKEN")
    monkeypatch.setenv(token, "t0ken")  # with a token the forge says private: the public still sees nothing
    private = await api.repository(host, "acme", "secret")
    assert private.outcome == "missing" and private.status == 200


@pytest.mark.parametrize("host", ["github.com", "codeberg.org"])
async def test_a_renamed_repository_says_where_without_following(forge: DemoForge, host: str) -> None:
    forge.add_repository(host, "acme", "widget", forge_id=77)
    forge.rename(host, "acme", "widget", "acme-corp", "gadget")
    answer = await api.repository(host, "acme", "widget")
    assert answer.outcome == "refused" and answer.redirect == "acme-corp/gadget" and answer.status == 301
    # GitHub names only the id: it is looked up on our own base; the new name itself is never asked
    assert not forge.requests(host, "acme-corp")


async def test_tarakan_lol_has_a_forge_only_when_its_url_is_set(
    forge: DemoForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVIDENCE_CHECK", "gate")
    assert api.evidence_enabled("tarakan.lol") and api.evidence_enabled("github.com")
    assert api.api_base("gitlab.com") == forge.settings()["FORGE_GITLAB_URL"] + "/api/v4"
    monkeypatch.delenv("FORGE_TARAKAN_URL")
    assert api.api_base("tarakan.lol") is None and not api.evidence_enabled("tarakan.lol")
    assert (await api.repository("tarakan.lol", "a", "b")).outcome == "refused"
    assert not api.evidence_enabled("example.org")
    monkeypatch.setenv("EVIDENCE_CHECK", "off")
    assert not api.evidence_enabled("github.com")


async def test_an_older_forgejo_compare_falls_back_to_the_commit(forge: DemoForge) -> None:
    widget(forge, "codeberg.org")
    forge.old_compare.add("codeberg.org")  # its compare answers 404 for a commit id
    assert (await api.in_history("codeberg.org", "acme", "widget", "trunk", OLD)).value is True
    assert (await api.in_history("codeberg.org", "acme", "widget", "trunk", "d" * 40)).outcome == "missing"
    assert len(forge.requests("codeberg.org", "/git/commits/")) == 2
