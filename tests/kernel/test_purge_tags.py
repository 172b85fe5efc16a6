"""What each audited action purges from the shared cache (docs/scaling.md "Shared cache"): `record_audit` reads, in
the action's transaction, the tags of the pages it may have changed. Real services, real rows; the purge itself is
tests/system/test_varnish.py's. Also the purge client's request splitting and its answer without a cache."""

from __future__ import annotations

import pytest

from app.accounts.models import Account
from app.infestations.dirty_queue import drain_all
from app.kernel import db, purge
from app.kernel.audit import _touched_tags
from app.kernel.shared_cache import ATLAS_TAG, SITEMAP_TAG, occurrence_tag, pattern_tag, repository_tag
from app.maintainers.models import FindingStatement
from app.record.outbox import mark_dirty
from app.reports.finding_memory import pattern_key
from app.reports.models import CanonicalFindingCheck
from tests import factories

TITLE, LONE = "Purged path traversal", "Purged lone secret"  # TITLE in two repositories (on the atlas), LONE in one


async def _tags(action: str, subject_type: str, subject_id: str) -> set[str] | None:
    async with db.transaction() as session:
        return await _touched_tags(session, action, subject_type, subject_id)


async def _world() -> tuple[Account, list[int], dict[str, int]]:
    author = await factories.create_account()
    ids: dict[str, int] = {}
    repos = []
    for n in range(2):
        repo = await factories.create_repository(f"purge{n}", "app")
        scan, canonical, occurrence = await factories.create_instance(repo, author, TITLE)
        repos.append(repo.id)
        ids[f"scan{n}"], ids[f"canonical{n}"], ids[f"occurrence{n}"] = scan.id, canonical.id, occurrence.id
    async with db.transaction() as session:
        await mark_dirty(session, [pattern_key(TITLE)], "test", ring=False)
    await drain_all()
    return author, repos, ids


async def test_a_report_names_its_repository_occurrences_patterns_and_the_atlas_when_it_is_on_it() -> None:
    author, repos, ids = await _world()
    key = pattern_key(TITLE)
    assert await _tags("scan.visibility", "scan", str(ids["scan0"])) == {
        SITEMAP_TAG,  # every action naming a repository's pages: its name may leave a sitemap
        repository_tag(repos[0]),
        occurrence_tag(ids["occurrence0"]),
        pattern_tag(key),
        ATLAS_TAG,
    }
    # a pattern with no rollup row is on no atlas page: the atlas stays cached
    repo = await factories.create_repository("purge-lone", "app")
    scan, _canonical, occurrence = await factories.create_instance(repo, author, LONE)
    assert await _tags("scan.visibility", "scan", str(scan.id)) == {
        SITEMAP_TAG,
        repository_tag(repo.id),
        occurrence_tag(occurrence.id),
        pattern_tag(pattern_key(LONE)),
    }


async def test_repository_actions_name_the_repository_not_its_occurrences() -> None:
    _author, repos, _ids = await _world()
    slug = "github.com/purge0/app"
    assert await _tags("repository.listing", "repository", slug) == {
        SITEMAP_TAG,
        repository_tag(repos[0]),
        pattern_tag(pattern_key(TITLE)),
        ATLAS_TAG,
    }
    assert await _tags("repository.maintainer_end", "repository", slug) == {repository_tag(repos[0])}
    # a hard delete audits after its rows are gone: the repository's tag and the atlas it may have fed
    assert await _tags("repository.delete", "repository", str(repos[0])) == {
        repository_tag(repos[0]),
        ATLAS_TAG,
        SITEMAP_TAG,
    }


async def test_statements_accounts_flags_and_unknown_actions() -> None:
    author, repos, ids = await _world()
    statement = await factories._stored(
        FindingStatement(canonical_finding_id=ids["canonical1"], author_id=author.id, status="under_investigation")
    )
    assert await _tags("statement.visibility", "statement", str(statement.id)) == {
        SITEMAP_TAG,
        repository_tag(repos[1]),
        occurrence_tag(ids["occurrence1"]),
        pattern_tag(pattern_key(TITLE)),
        ATLAS_TAG,
    }
    reviewer = await factories.create_account(trust_tier="reviewer")
    await factories._stored(
        CanonicalFindingCheck(
            canonical_finding_id=ids["canonical1"], account_id=reviewer.id, commit_sha="a" * 40,
            verdict="confirmed", notes="checked by hand",
        )
    )  # fmt: skip
    assert await _tags("account.change", "account", reviewer.handle) == {repository_tag(repos[1]), SITEMAP_TAG}
    assert await _tags("account.change", "account", author.handle) == set()
    assert await _tags("flag.set", "flag", "infestations.read_from_rollup") == {ATLAS_TAG}
    assert await _tags("something.new", "widget", "7") is None  # purge everything


async def test_a_change_to_a_disclosure_clock_names_its_finding_pages_not_everything() -> None:
    # a person's extension or publication (app/disclosure/actions.py) or a `fixed` statement's move of the deadline
    _author, repos, ids = await _world()
    for action in ("disclosure.extend", "disclosure.publish", "disclosure.fixed"):
        assert await _tags(action, "disclosure", str(ids["canonical0"])) == {
            SITEMAP_TAG,
            repository_tag(repos[0]),
            occurrence_tag(ids["occurrence0"]),
            pattern_tag(pattern_key(TITLE)),
            ATLAS_TAG,
        }


def test_tags_are_sent_in_requests_under_the_header_limit() -> None:
    tags = [occurrence_tag(n) for n in range(10**6, 10**6 + 2000)]
    chunks = purge._chunks(tags)
    assert len(chunks) == 5 and all(len(chunk) <= purge.MAX_TAG_BYTES for chunk in chunks)
    assert " ".join(chunks).split() == tags


async def test_without_a_shared_cache_nothing_is_read_or_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VARNISH_PURGE_URLS", raising=False)
    outcome = await purge.purge({ATLAS_TAG})
    assert (outcome.caches, outcome.state) == (0, "purged")
    with purge.collect() as outcomes:
        async with db.transaction():
            purge.purge_after_commit({ATLAS_TAG})
    assert outcomes == [] and purge.notice(outcomes) is None
