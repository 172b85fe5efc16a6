"""The maintain page of a signed-in account (claim, the file to commit, verify: plain forms, CSRF by origin,
private), the moderator's form that ends a maintainership (audited, the mode restored), the command line and the
worker's daily job."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

import httpx
import pytest
from bs4 import BeautifulSoup

from app.cli import build_parser
from app.registry.models import Repository
from jobs.worker import maintainer_recheck_job
from tests import factories
from tests.harness import tarakan
from tests.maintainers.support import Forge
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as
from tests.sql import one, rows, scalar


def maintain_url(repo: Repository) -> str:
    return f"/repos/{repo.host}/{repo.owner}/{repo.name}/maintain"


async def test_claim_and_verify_on_the_maintain_page(client: httpx.AsyncClient, forge: Forge) -> None:
    repo = await factories.create_repository()
    page = maintain_url(repo)
    anonymous = await client.get(page)
    assert anonymous.status_code == 303 and anonymous.headers["location"] == f"/login?next={quote(page, safe='')}"

    member = await factories.create_account()
    await act_as(client, member)
    first = await client.get(page)
    assert first.status_code == 200 and first.headers["cache-control"] == "private, no-store"
    html = BeautifulSoup(first.text, "html.parser")
    assert html.h1 is not None and "Maintain" in html.h1.text
    assert html.find("form", action=f"{page}/claim") is not None

    # CSRF: a cross-origin post with the session cookie is refused before the route
    forged = await client.post(f"{page}/claim", headers={"Origin": "https://evil.example"})
    assert forged.status_code == 403
    assert await scalar("SELECT count(*) FROM maintainer_claims") == 0
    claimed = await client.post(f"{page}/claim", headers=SAME_ORIGIN)
    assert claimed.status_code == 303 and claimed.headers["location"] == page
    pending = BeautifulSoup((await client.get(page)).text, "html.parser")
    token_tag = pending.find(id="maintain-token")
    assert token_tag is not None
    token = token_tag.text.strip()
    claim_id = await scalar("SELECT id FROM maintainer_claims WHERE token = :t", t=token)
    assert claim_id is not None
    form = {"claim_id": str(claim_id)}

    refused = await client.post(f"{page}/verify", headers=SAME_ORIGIN, data=form)
    assert refused.status_code == 422 and "was not found" in refused.text
    assert refused.headers["cache-control"] == "private, no-store"
    forge.fail(repo.host, repo.owner, repo.name)
    down = await client.post(f"{page}/verify", headers=SAME_ORIGIN, data=form)
    assert down.status_code == 503 and int(down.headers["retry-after"]) > 0
    forge.serve_file(repo.host, repo.owner, repo.name, f"# ours\n{token}\n")
    verified = await client.post(f"{page}/verify", headers=SAME_ORIGIN, data=form)
    assert verified.status_code == 303 and verified.headers["location"] == f"{page}?verified=1"
    done = BeautifulSoup((await client.get(f"{page}?verified=1")).text, "html.parser")
    status = done.find(id="maintain-status")
    assert status is not None and "verified maintainer" in status.text
    assert [li.text.split(",")[0].strip() for li in done.select("#maintainers > li")] == [f"@{member.handle}"]
    assert not done.select("#maintainers form")  # the end form is for moderators

    assert (
        await client.get(maintain_url(await factories.create_repository(listing_status="pending")))
    ).status_code == 404


async def test_a_moderator_ends_a_maintainership_audited(client: httpx.AsyncClient, forge: Forge) -> None:
    repo = await factories.create_repository()
    await _verified_maintainer(client, forge, repo, handle="keeper")
    assert await scalar("SELECT participation_mode FROM repositories WHERE id = :id", id=repo.id) == (
        "maintainer_verified"
    )
    await act_as(client, await factories.create_account(platform_role="moderator"))
    page = BeautifulSoup((await client.get(maintain_url(repo))).text, "html.parser")
    end_url = f"/moderation/repos/{repo.host}/{repo.owner}/{repo.name}/maintainers/keeper"
    assert page.find("form", action=end_url) is not None

    short = await client.post(end_url, headers=SAME_ORIGIN, data={"reason": "no", "notes": "short"})
    assert short.status_code == 422
    unknown = f"/moderation/repos/{repo.host}/{repo.owner}/{repo.name}/maintainers/nobody"
    assert (await client.post(unknown, headers=SAME_ORIGIN, data={"reason": "gone", "notes": NOTES})).status_code == 404
    ended = await client.post(end_url, headers=SAME_ORIGIN, data={"reason": "account compromised", "notes": NOTES})
    assert ended.status_code == 303 and ended.headers["location"].startswith(maintain_url(repo) + "?recorded=")
    assert await one("SELECT ended_reason FROM repository_maintainers") == {"ended_reason": "moderation"}
    assert await scalar("SELECT participation_mode FROM repositories WHERE id = :id", id=repo.id) == "unclaimed"
    events = await rows("SELECT action, subject_id, before, after, reason FROM audit_events")
    assert events == [
        {
            "action": "repository.maintainer_end",
            "subject_id": f"{repo.host}/{repo.owner}/{repo.name}",
            "before": {"maintainer": "@keeper", "participation_mode": "maintainer_verified"},
            "after": {"maintainer": None, "participation_mode": "unclaimed"},
            "reason": "account compromised",
        }
    ]
    # a member cannot
    await act_as(client, await factories.create_account())
    assert (await client.post(end_url, headers=SAME_ORIGIN, data={"reason": "x", "notes": NOTES})).status_code == 403


async def test_the_command_line_and_the_daily_job(
    forge: Forge, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = await factories.create_repository()
    account = await factories.create_account(email="keeper@example.com", handle="keeper")
    slug = f"{repo.host}/{repo.owner}/{repo.name}"
    assert await run_cli("maintainers", "claim", slug, "--as", "keeper@example.com") == 0
    claimed = capsys.readouterr().out
    token = str(await scalar("SELECT token FROM maintainer_claims WHERE account_id = :a", a=account.id))
    assert token in claimed and ".tarakan/verify.txt" in claimed
    claim_id = str(await scalar("SELECT id FROM maintainer_claims"))
    forge.serve_file(repo.host, repo.owner, repo.name, token)
    assert await run_cli("maintainers", "verify", claim_id, "--as", "keeper@example.com") == 0
    assert '"state": "verified"' in capsys.readouterr().out

    # the worker's daily job: one run per slot fleet-wide; the file gone once starts the count
    forge.remove(repo.host, repo.owner, repo.name)
    ctx = {"worker_id": "test-worker", "job_id": "j1"}
    assert await maintainer_recheck_job(ctx, slot=datetime(2026, 12, 1, 4, 45, tzinfo=UTC).isoformat())
    assert not await maintainer_recheck_job(ctx, slot=datetime(2026, 12, 1, 4, 45, tzinfo=UTC).isoformat())
    assert await scalar("SELECT first_missing_at IS NOT NULL FROM repository_maintainers")

    # `recheck` reads MAINTAINER_RECHECK_HOURS at its run and prints what ended
    monkeypatch.setenv("MAINTAINER_RECHECK_HOURS", "0")
    rechecked = await tarakan("maintainers", "recheck")
    assert rechecked.code == 0, rechecked.err
    assert f"ended: @keeper no longer maintains {slug} (file_missing)" in rechecked.out


async def run_cli(*argv: str) -> int:
    """A `tarakan` command's handler in this process (the real parser; `tarakan()` runs one as a process)."""
    args = build_parser().parse_args(argv)
    result: int = await args.handler(args)
    return result


async def _verified_maintainer(client: httpx.AsyncClient, forge: Forge, repo: Repository, *, handle: str) -> None:
    from app.maintainers import service

    account = await factories.create_account(handle=handle)
    view, _ = await service.claim_repository(account.id, repo.host, repo.owner, repo.name)
    forge.serve_file(repo.host, repo.owner, repo.name, view.token)
    await service.verify_claim(account.id, view.id)
