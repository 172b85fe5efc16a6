"""A banned or suspended account loses its voice (issue 34, docs/domain.md "Maintainers"): its maintainerships end
(audited, `account_locked`) and its statements leave every surface at the next request, in the transaction that
locked it; lifting the lock restores nothing. And a moderator hides all of one handle's statements in one action
(console form and CLI). Real services; the shared cache is a loopback receiver of the purges."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from bs4 import BeautifulSoup

from app.accounts.models import Account
from app.kernel.shared_cache import repository_tag
from app.maintainers import service
from app.moderation.account_actions import change_account
from tests import factories
from tests.harness import assert_one_line_error, tarakan
from tests.maintainers.statement_support import Published, bearer, published, state, verified_maintainer
from tests.maintainers.support import Forge
from tests.maintainers.test_statements import NOT_AFFECTED, statement_entries, surfaces
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as
from tests.sql import rows, scalar


class PurgeReceiver:
    """A shared cache on loopback: answers every PURGE and BAN 200 and keeps the tags it was sent."""

    def __init__(self) -> None:
        self.tags: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_PURGE(self) -> None:
                receiver.tags.update(self.headers.get("xkey-purge", "").split())
                self._ok()

            def do_BAN(self) -> None:
                receiver.tags.add("*everything*")
                self._ok()

            def _ok(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[PurgeReceiver]:
    receiver = PurgeReceiver()
    threading.Thread(target=receiver.server.serve_forever, daemon=True).start()
    monkeypatch.setenv("VARNISH_PURGE_URLS", receiver.url)
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


async def also_maintains(forge: Forge, account: Account, p: Published) -> None:
    claim, _ = await service.claim_repository(account.id, p.repository.host, p.repository.owner, p.repository.name)
    forge.serve_file(p.repository.host, p.repository.owner, p.repository.name, claim.token)
    assert (await service.verify_claim(account.id, claim.id)).state == "verified"


async def modes() -> list[str]:
    return [r["participation_mode"] for r in await rows("SELECT participation_mode FROM repositories ORDER BY id")]


async def test_a_banned_maintainer_loses_maintainerships_and_statements_everywhere(
    client: httpx.AsyncClient, forge: Forge, cache: PurgeReceiver
) -> None:
    p, q = await published(), await published(host="codeberg.org")
    keeper = await verified_maintainer(forge, p.repository, handle="keeper")
    await also_maintains(forge, keeper, q)
    headers = await bearer(keeper)
    assert (await state(client, p.canonical, headers, **NOT_AFFECTED)).status_code == 201
    shown = await surfaces(client, p)
    assert shown["sarif"][0][0]["status"] == "accepted" and shown["twin"]["author"] == "keeper"
    assert await modes() == ["maintainer_verified", "maintainer_verified"]
    entries_before = len(await statement_entries(client))
    cache.tags.clear()

    moderator = await factories.create_account(platform_role="moderator")
    await act_as(client, moderator)
    banned = await client.post(
        "/moderation/accounts/keeper", headers=SAME_ORIGIN, data={"state": "banned", "reason": "abuse", "notes": NOTES}
    )
    assert banned.status_code == 303, banned.text
    await act_as(client, None)

    # the maintainerships ended, for the lock's reason, by the moderator; the modes they replaced came back
    ended = await rows("SELECT ended_reason, ended_by_id FROM repository_maintainers ORDER BY repository_id")
    assert ended == [{"ended_reason": "account_locked", "ended_by_id": moderator.id}] * 2
    assert await modes() == ["unclaimed", "unclaimed"]
    # the statement is current nowhere: finding page and twin, repository record, SARIF's suppression, OpenVEX
    gone = await surfaces(client, p)
    assert gone["page"] is None and gone["twin"] is None and gone["record"] is None
    assert gone["sarif"] == (None, None) and gone["vex"].status_code == 404 and gone["atom"] == []
    assert gone["maintainers"] == []
    entries = await statement_entries(client)
    assert len(entries) == entries_before + 1
    assert entries[-1]["canonical"] == p.canonical and entries[-1]["reason"] == "moderation"
    # every repository's pages were purged from the shared cache after the commit
    assert {repository_tag(p.repository.id), repository_tag(q.repository.id)} <= cache.tags
    # audited: the account's event names what it took, and each end and hide has its own event
    audit = await rows("SELECT action, subject_id, before, after, reason FROM audit_events ORDER BY id")
    by_action = {(e["action"], e["subject_id"]): e for e in audit}
    change = by_action[("account.change", "keeper")]
    assert change["before"] == {"state": "active", "maintainerships": [p.slug, q.slug], "statements_shown": 1}
    assert change["after"] == {"state": "banned", "maintainerships": [], "statements_shown": 0}
    for slug in (p.slug, q.slug):
        end = by_action[("repository.maintainer_end", slug)]
        assert end["reason"] == "account_locked" and end["before"]["maintainer"] == "@keeper"
    (hide,) = [e for e in audit if e["action"] == "statement.visibility"]
    assert hide["after"] == {"visibility": "hidden"} and hide["reason"] == "account_locked"

    # lifting the lock restores nothing: no maintainership, no statement; the account claims again
    await change_account(moderator, "keeper", state="active", reason="appeal", notes=NOTES)
    assert await scalar("SELECT count(*) FROM repository_maintainers WHERE ended_at IS NULL") == 0
    assert (await surfaces(client, p))["twin"] is None
    refused = await state(client, p.canonical, await bearer(keeper), **NOT_AFFECTED)
    assert refused.status_code == 403 and "maintainer" in refused.text


async def test_a_suspension_from_the_cli_ends_the_maintainership_too(forge: Forge) -> None:
    p = await published()
    keeper = await verified_maintainer(forge, p.repository, handle="keeper")
    moderator = await factories.create_account(email="mod@example.com", platform_role="moderator")
    suspended = await tarakan(
        "moderate", "account", keeper.handle, "--state", "suspended", "--reason", "abuse", "--notes", NOTES,
        "--as", moderator.email,
    )  # fmt: skip
    assert suspended.code == 0, suspended.err
    assert json.loads(suspended.out.splitlines()[0])["after"] == {"state": "suspended", "maintainerships": []}
    assert await scalar("SELECT ended_reason FROM repository_maintainers") == "account_locked"
    # a restriction is not a lock: it ends nothing
    other = await verified_maintainer(forge, p.repository, handle="other")
    await change_account(moderator, other.handle, state="restricted", reason="probation", notes=NOTES)
    assert await scalar("SELECT count(*) FROM repository_maintainers WHERE ended_at IS NULL") == 1


async def test_a_moderator_hides_all_of_one_handles_statements_in_one_action(
    client: httpx.AsyncClient, forge: Forge, cache: PurgeReceiver
) -> None:
    p = await published(titles=("Open redirect in login", "Reflected XSS in search"))
    keeper = await verified_maintainer(forge, p.repository, handle="keeper")
    headers = await bearer(keeper)
    canonicals = [str(f["canonical_public_id"]) for f in p.report["findings"]]
    for canonical in canonicals:
        for _ in range(2):
            assert (await state(client, canonical, headers, **NOT_AFFECTED)).status_code == 201
    entries_before = len(await statement_entries(client))
    moderator = await factories.create_account(email="mod@example.com", platform_role="moderator")
    await act_as(client, moderator)
    listed = BeautifulSoup((await client.get("/moderation/accounts")).text, "html.parser")
    assert listed.find("form", action="/moderation/accounts/keeper/statements") is not None

    # bad input: a 422 naming the field, nothing written
    short = await client.post(
        "/moderation/accounts/keeper/statements", headers=SAME_ORIGIN, data={"reason": "spam", "notes": "short"}
    )
    assert short.status_code == 422 and "notes" in short.text
    assert await scalar("SELECT count(*) FROM audit_events") == 0
    assert await scalar("SELECT count(*) FROM finding_statements WHERE visibility = 'shown'") == 4

    cache.tags.clear()
    hidden = await client.post(
        "/moderation/accounts/keeper/statements", headers=SAME_ORIGIN, data={"reason": "spam", "notes": NOTES}
    )
    assert hidden.status_code == 303, hidden.text
    assert await scalar("SELECT count(*) FROM finding_statements WHERE visibility = 'shown'") == 0
    assert (await surfaces(client, p))["sarif"] == (None, None)
    # one feed entry per finding, each a withdrawal (the export is rebuilt), and the repository purged
    entries = await statement_entries(client)
    assert len(entries) == entries_before + 2
    assert sorted(e["canonical"] for e in entries[-2:]) == sorted(canonicals)
    assert all(e["reason"] == "moderation" and "status" not in e for e in entries[-2:])
    assert repository_tag(p.repository.id) in cache.tags
    audit = await rows("SELECT action, subject_type, before, after, reason FROM audit_events ORDER BY id")
    assert [e["action"] for e in audit] == ["statement.visibility"] * 4 + ["account.statements_hide"]
    assert audit[-1]["before"] == {"statements_shown": 4} and audit[-1]["after"] == {"statements_shown": 0}
    # the maintainership stays: this is about the statements only
    assert await scalar("SELECT count(*) FROM repository_maintainers WHERE ended_at IS NULL") == 1

    # nothing left to hide: a 422 naming the handle, nothing written
    again = await client.post(
        "/moderation/accounts/keeper/statements", headers=SAME_ORIGIN, data={"reason": "spam", "notes": NOTES}
    )
    assert again.status_code == 422 and "no shown statement" in again.text
    assert await scalar("SELECT count(*) FROM audit_events") == 5

    # the CLI: the same action
    await act_as(client, None)
    assert (await state(client, canonicals[0], headers, **NOT_AFFECTED)).status_code == 201
    done = await tarakan(
        "moderate", "statements", "keeper", "--reason", "spam", "--notes", NOTES, "--as", moderator.email
    )
    assert done.code == 0, done.err
    assert json.loads(done.out.splitlines()[0])["after"] == {"statements_shown": 0}
    assert await scalar("SELECT count(*) FROM finding_statements WHERE visibility = 'shown'") == 0
    nothing = await tarakan(
        "moderate", "statements", "keeper", "--reason", "spam", "--notes", NOTES, "--as", moderator.email
    )
    assert_one_line_error(nothing, "handle: @keeper has no shown statement")
