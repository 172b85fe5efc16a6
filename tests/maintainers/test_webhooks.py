"""The webhook API (docs/domain.md "Webhooks", docs/security.md "Webhook destinations"): a maintainer registers a
webhook and sees its secret once; refused destinations (http, inside addresses, names that resolve only to them),
a sixth webhook, a non-maintainer and an unknown repository; the owner's log, enable and delete, and a 404 for
anyone else. Names resolve through a resolver the test swaps in: nothing leaves the machine."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.accounts.service import create_token
from app.maintainers import destinations, webhook_queue, webhooks
from tests import factories
from tests.maintainers.webhook_support import SCOPE, maintainer, webhooks_url
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as, make_account
from tests.record.test_changes import submit
from tests.site.test_openapi import _conforms
from tests.sql import execute, one, scalar

NAMES = {
    "hooks.example.com": ["93.184.216.34"],
    "mixed.example.com": ["10.0.0.7", "2606:4700::6810:85e5"],  # public and inside: allowed (only public used)
    "inside.example.com": ["10.1.2.3", "127.0.0.1"],
    "metadata.example.com": ["169.254.169.254"],
    "v6inside.example.com": ["fd00:ec2::254", "::1"],
}


@pytest.fixture(autouse=True)
def resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[str]]]:
    names = dict(NAMES)

    async def resolve(host: str, port: int) -> list[destinations.Address]:
        if host not in names:
            raise OSError("Name or service not known")
        return [ipaddress.ip_address(a) for a in names[host]]

    monkeypatch.setattr(destinations, "resolver", resolve)
    monkeypatch.delenv("WEBHOOK_ALLOW_PRIVATE", raising=False)
    yield names


async def document(client: httpx.AsyncClient) -> dict[str, Any]:
    return dict((await client.get("/api/v1/openapi.json")).json())


async def test_a_maintainer_registers_a_webhook_and_sees_its_secret_only_once(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    _, headers = await maintainer(repo)
    made = await client.post(webhooks_url(repo), headers=headers, json={"url": "https://hooks.example.com/tarakan"})
    assert made.status_code == 201, made.text
    hook = made.json()["webhook"]
    assert set(hook) == {"id", "repository", "url", "secret", "disabled_at", "inserted_at"}
    assert hook["url"] == "https://hooks.example.com/tarakan" and hook["disabled_at"] is None
    assert hook["repository"] == f"{repo.host}/{repo.owner}/{repo.name}"
    assert hook["secret"].startswith("whsec_") and len(hook["secret"]) == 6 + 64
    assert await scalar("SELECT secret FROM webhooks") == hook["secret"]  # stored to sign
    openapi = await document(client)
    _conforms(openapi, "/api/v1/repos/{host}/{owner}/{name}/webhooks", "post", made)

    shown = await client.get(f"/api/v1/webhooks/{hook['id']}", headers=headers)
    assert shown.status_code == 200, shown.text
    assert "secret" not in shown.json()["webhook"] and shown.json()["webhook"]["disabled_at"] is None
    _conforms(openapi, "/api/v1/webhooks/{webhook_id}", "get", shown)
    listed = await client.get(webhooks_url(repo), headers=headers)
    assert [w["id"] for w in listed.json()["webhooks"]] == [hook["id"]]
    _conforms(openapi, "/api/v1/repos/{host}/{owner}/{name}/webhooks", "get", listed)
    # public and inside addresses together: registered (the delivery connects only to a public one)
    mixed = await client.post(webhooks_url(repo), headers=headers, json={"url": "https://mixed.example.com/"})
    assert mixed.status_code == 201, mixed.text


REFUSED = [
    ("http://hooks.example.com/tarakan", "https"),
    ("ftp://hooks.example.com/", "https"),
    ("https://127.0.0.1/hook", "loopback"),
    ("https://127.1.2.3:8443/hook", "loopback"),
    ("https://[::1]/hook", "loopback"),
    ("https://10.0.0.1/", "private"),
    ("https://192.168.1.1/", "private"),
    ("https://172.16.0.1/", "private"),
    ("https://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("https://[fd00:ec2::254]/", "cloud metadata"),
    ("https://169.254.1.1/", "link-local"),
    ("https://[fe80::1]/", "link-local"),
    ("https://100.64.0.1/", "CGNAT"),
    ("https://[fc00::1]/", "unique-local"),
    ("https://0.0.0.0/", "0.0.0.0/8"),
    ("https://[::ffff:127.0.0.1]/", "IPv4-mapped"),
    ("https://[::ffff:8.8.8.8]/", "IPv4-mapped"),
    ("https://224.0.0.1/", "multicast"),
    ("https://inside.example.com/hook", "resolves only to refused addresses (loopback, private)"),
    ("https://metadata.example.com/", "cloud metadata"),
    ("https://v6inside.example.com/", "cloud metadata, loopback"),
    ("https://nowhere.example.com/", "could not be resolved"),
    ("https://user:pass@hooks.example.com/", "user name or password"),
    ("https://hooks.example.com/#frag", "fragment"),
    ("https:///nohost", "host"),
    ("https://xn--zz.example.com/", "is not a URL"),  # an IDNA label that does not decode
    ("https://hooks.example.com:99999/", "port"),
    ("https://hooks.example.com:8080/", "port 443 or 8443"),
    ("not a url", "spaces"),
    ("https://hooks.example.com/" + "a" * 2000, "2000 characters"),
]


async def test_registration_refuses_a_destination_naming_url(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    _, headers = await maintainer(repo)
    for url, says in REFUSED:
        refused = await client.post(webhooks_url(repo), headers=headers, json={"url": url})
        assert refused.status_code == 422, (url, refused.text)
        assert says in refused.json()["errors"]["url"][0], (url, refused.json())
    assert (await client.post(webhooks_url(repo), headers=headers, json={})).status_code == 422
    assert (await client.post(webhooks_url(repo), headers=headers, json={"url": 7})).status_code == 422
    assert await scalar("SELECT count(*) FROM webhooks") == 0


async def test_a_loopback_receiver_and_http_only_with_webhook_allow_private(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await factories.create_repository()
    _, headers = await maintainer(repo)
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "1")
    made = await client.post(webhooks_url(repo), headers=headers, json={"url": "http://127.0.0.1:8080/hook"})
    assert made.status_code == 201, made.text
    # what the address rule does not cover stays refused
    userinfo = await client.post(webhooks_url(repo), headers=headers, json={"url": "http://u:p@127.0.0.1/"})
    assert userinfo.status_code == 422


async def test_who_may_register_and_how_many(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    owner, headers = await maintainer(repo)
    body = {"url": "https://hooks.example.com/tarakan"}

    stranger = await make_account("stranger")
    strangers = {"Authorization": "Bearer " + await create_token(stranger.id, [SCOPE])}
    forbidden = await client.post(webhooks_url(repo), headers=strangers, json=body)
    assert forbidden.status_code == 403 and "repository" in forbidden.json()["errors"], forbidden.text
    unknown = await client.post("/api/v1/repos/github.com/nobody/nothing/webhooks", headers=strangers, json=body)
    assert unknown.status_code == 404
    quarantined = await factories.create_repository(listing_status="quarantined")
    hidden = await client.post(webhooks_url(quarantined), headers=headers, json=body)
    assert hidden.status_code == 404
    no_scope = {"Authorization": "Bearer " + await create_token(owner.id, ["findings:submit"])}
    assert (await client.post(webhooks_url(repo), headers=no_scope, json=body)).status_code == 403
    assert (await client.post(webhooks_url(repo), json=body)).status_code == 401

    for _ in range(webhooks.MAX_PER_REPOSITORY):
        assert (await client.post(webhooks_url(repo), headers=headers, json=body)).status_code == 201
    sixth = await client.post(webhooks_url(repo), headers=headers, json=body)
    assert sixth.status_code == 409 and "5 webhooks" in sixth.json()["errors"]["repository"][0]
    assert await scalar("SELECT count(*) FROM webhooks") == webhooks.MAX_PER_REPOSITORY

    # a maintainer who is no longer in good standing
    _, restricted = await maintainer(repo, state="restricted")
    assert (await client.post(webhooks_url(repo), headers=restricted, json=body)).status_code == 403


async def test_a_webhook_url_names_port_443_or_8443_only(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await factories.create_repository()
    _, headers = await maintainer(repo)
    # another port of a public host would make the registry a port scanner of it
    for url in ("https://hooks.example.com:8080/", "https://hooks.example.com:22/", "https://hooks.example.com:6379/"):
        refused = await client.post(webhooks_url(repo), headers=headers, json={"url": url})
        assert refused.status_code == 422, (url, refused.text)
        assert refused.json() == {"errors": {"url": ["must use port 443 or 8443"]}}, url
    assert await scalar("SELECT count(*) FROM webhooks") == 0
    for url in (
        "https://hooks.example.com:8443/tarakan",
        "https://hooks.example.com:443/",
        "https://hooks.example.com/",
    ):
        made = await client.post(webhooks_url(repo), headers=headers, json={"url": url})
        assert made.status_code == 201, (url, made.text)
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "1")  # tests' receivers listen on any port
    loopback = await client.post(webhooks_url(repo), headers=headers, json={"url": "http://127.0.0.1:6379/"})
    assert loopback.status_code == 201, loopback.text


async def test_an_ended_maintainers_webhooks_stop_counting_toward_the_five(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    former, former_headers = await maintainer(repo)
    body = {"url": "https://hooks.example.com/tarakan"}
    for _ in range(webhooks.MAX_PER_REPOSITORY):
        assert (await client.post(webhooks_url(repo), headers=former_headers, json=body)).status_code == 201
    await execute(
        "UPDATE repository_maintainers SET ended_at = now(), ended_reason = 'moderation' WHERE account_id = :a",
        a=former.id,
    )
    _, headers = await maintainer(repo)  # the next maintainer is not blocked by webhooks nobody delivers to
    for _ in range(webhooks.MAX_PER_REPOSITORY):
        made = await client.post(webhooks_url(repo), headers=headers, json=body)
        assert made.status_code == 201, made.text
    sixth = await client.post(webhooks_url(repo), headers=headers, json=body)
    assert sixth.status_code == 409 and "5 webhooks" in sixth.json()["errors"]["repository"][0]
    # the former maintainer's stay theirs to read and delete
    kept = await client.get(webhooks_url(repo), headers=former_headers)
    assert len(kept.json()["webhooks"]) == webhooks.MAX_PER_REPOSITORY
    assert await scalar("SELECT count(*) FROM webhooks") == 2 * webhooks.MAX_PER_REPOSITORY


async def test_a_moderator_deletes_anyones_webhook_with_a_reason_and_notes_audited(client: httpx.AsyncClient) -> None:
    repo = await factories.create_repository()
    owner, headers = await maintainer(repo, handle="keeper")
    url = "https://hooks.example.com/services/T0/B0/sekrit-receiver-token"
    made = await client.post(webhooks_url(repo), headers=headers, json={"url": url})
    hook_id = made.json()["webhook"]["id"]
    other = await client.post(webhooks_url(repo), headers=headers, json={"url": "https://hooks.example.com/b"})
    await submit(await make_account("agent"), repo, "SQL injection in login")
    assert await webhook_queue.fan_out() == 6  # the log that goes with them
    await execute("UPDATE repository_maintainers SET ended_at = now(), ended_reason = 'moderation'")
    maintain = f"/repos/{repo.host}/{repo.owner}/{repo.name}/maintain"
    action = f"/moderation/webhooks/{hook_id}"
    form = {"reason": "abusive receiver", "notes": NOTES}

    await act_as(client, owner)  # not a moderator: the form is refused, the list not shown
    assert action not in (await client.get(maintain)).text
    assert (await client.post(action, headers=SAME_ORIGIN, data=form)).status_code == 403

    moderator = await make_account("mod", platform_role="moderator")
    await act_as(client, moderator)
    page = await client.get(maintain)
    assert page.status_code == 200 and action in page.text
    assert "@keeper no longer maintains this repository" in page.text
    assert "sekrit" not in page.text and "hooks.example.com" in page.text  # the host, not the path
    bad = await client.post(action, headers=SAME_ORIGIN, data={"reason": "x", "notes": "too short"})
    assert bad.status_code == 422 and "reason must be 3 to 100" in bad.text and "notes must be 20" in bad.text
    assert await scalar("SELECT count(*) FROM webhooks") == 2  # nothing written

    deleted = await client.post(action, headers=SAME_ORIGIN, data=form)
    assert deleted.status_code == 303, deleted.text
    assert deleted.headers["location"].startswith(maintain + "?recorded=")
    assert await scalar("SELECT array_agg(id) FROM webhooks") == [other.json()["webhook"]["id"]]
    assert await scalar("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = :w", w=hook_id) == 0
    event = await one("SELECT * FROM audit_events ORDER BY id DESC LIMIT 1")
    assert event is not None
    assert (event["action"], event["subject_type"], event["subject_id"], event["actor_id"]) == (
        "webhook.delete",
        "repository",
        f"{repo.host}/{repo.owner}/{repo.name}",
        moderator.id,
    )
    assert event["before"] == {"webhook": hook_id, "owner": "@keeper", "destination": "hooks.example.com"}
    assert event["after"] == {"webhook": None}
    assert (event["reason"], event["notes"]) == ("abusive receiver", NOTES)
    assert "sekrit" not in str(event)
    assert (await client.post(action, headers=SAME_ORIGIN, data=form)).status_code == 404
    assert (await client.get(f"/api/v1/webhooks/{hook_id}", headers=headers)).status_code == 404  # the owner's too


async def test_the_owner_reads_the_log_enables_and_deletes_and_everyone_else_gets_404(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "1")
    repo = await factories.create_repository()
    _, headers = await maintainer(repo)
    hook = (await client.post(webhooks_url(repo), headers=headers, json={"url": "http://127.0.0.1:9/x"})).json()
    hook_id = hook["webhook"]["id"]
    await submit(await make_account("agent"), repo, "SQL injection in login", "Path traversal in upload")
    assert await webhook_queue.fan_out() == 5

    openapi = await document(client)
    first = await client.get(f"/api/v1/webhooks/{hook_id}/deliveries", headers=headers, params={"limit": 2})
    assert first.status_code == 200, first.text
    _conforms(openapi, "/api/v1/webhooks/{webhook_id}/deliveries", "get", first)
    page = first.json()
    assert [e["kind"] for e in page["entries"]] == ["finding.status", "finding.status"]  # newest first
    entry = page["entries"][0]
    assert set(entry) == {
        "delivery",
        "seq",
        "kind",
        "attempts",
        "last_status",
        "last_error",
        "next_attempt_at",
        "delivered_at",
    }
    walked = page["entries"]
    while page["next_cursor"]:
        page = (
            await client.get(
                f"/api/v1/webhooks/{hook_id}/deliveries", headers=headers, params={"cursor": page["next_cursor"]}
            )
        ).json()
        walked += page["entries"]
    assert [e["seq"] for e in walked] == sorted((e["seq"] for e in walked), reverse=True) and len(walked) == 5
    assert walked[-1]["kind"] == "repository.listed" and walked[-1]["next_attempt_at"] is not None  # the head
    bad = await client.get(f"/api/v1/webhooks/{hook_id}/deliveries", headers=headers, params={"limit": 101})
    assert bad.status_code == 400 and "limit" in bad.json()["errors"]

    # enabling a disabled webhook: a current maintainer only
    await execute("UPDATE webhooks SET disabled_at = now(), failing_since = now(), consecutive_failures = 9")
    await execute("UPDATE webhook_deliveries SET next_attempt_at = NULL")
    enabled = await client.post(f"/api/v1/webhooks/{hook_id}/enable", headers=headers)
    assert enabled.status_code == 200, enabled.text
    _conforms(openapi, "/api/v1/webhooks/{webhook_id}/enable", "post", enabled)
    assert enabled.json()["webhook"]["disabled_at"] is None and enabled.json()["webhook"]["consecutive_failures"] == 0
    assert await scalar("SELECT count(*) FROM webhook_deliveries WHERE next_attempt_at IS NOT NULL") == 1

    _, others = await maintainer(repo)
    for method, path in [
        ("GET", f"/api/v1/webhooks/{hook_id}"),
        ("GET", f"/api/v1/webhooks/{hook_id}/deliveries"),
        ("POST", f"/api/v1/webhooks/{hook_id}/enable"),
        ("DELETE", f"/api/v1/webhooks/{hook_id}"),
        ("GET", "/api/v1/webhooks/999999"),
        ("DELETE", "/api/v1/webhooks/not-a-number"),
    ]:
        answer = await client.request(method, path, headers=others)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json() == {"errors": {"webhook": ["not found"]}}
    assert (await client.get(webhooks_url(repo), headers=others)).json() == {"webhooks": []}

    await execute("UPDATE repository_maintainers SET ended_at = now(), ended_reason = 'moderation'")
    await execute("UPDATE webhooks SET disabled_at = now()")
    ended = await client.post(f"/api/v1/webhooks/{hook_id}/enable", headers=headers)
    assert ended.status_code == 403, ended.text
    with_body = await client.request("DELETE", f"/api/v1/webhooks/{hook_id}", headers=headers, json={"x": 1})
    assert with_body.status_code == 422 and "body" in with_body.json()["errors"]
    deleted = await client.delete(f"/api/v1/webhooks/{hook_id}", headers=headers)  # after the maintainership too
    assert deleted.status_code == 204 and deleted.content == b""
    assert await scalar("SELECT count(*) FROM webhook_deliveries") == 0  # the log goes with it
    assert (await client.delete(f"/api/v1/webhooks/{hook_id}", headers=headers)).status_code == 404


def test_refused_addresses_by_kind() -> None:
    def kind(address: str) -> str | None:
        return destinations.refusal(ipaddress.ip_address(address))

    assert kind("93.184.216.34") is None and kind("2606:4700::1") is None
    assert kind("127.0.0.1") == "loopback" and kind("::1") == "loopback"
    assert kind("169.254.169.254") == "cloud metadata" and kind("fd00:ec2::254") == "cloud metadata"
    assert kind("100.100.100.100") == "shared address space (CGNAT)"
    assert kind("64:ff9b::a00:1") == "NAT64" and kind("2002:a00:1::") == "6to4"
    assert kind("240.0.0.1") == "reserved" and kind("ff02::1") == "multicast"


async def test_a_name_written_as_a_number_resolves_to_its_address_and_is_refused() -> None:
    # the system resolver parses numeric forms itself (inet_aton): no query leaves the machine
    assert await destinations.system_resolver("2130706433", 443) == [ipaddress.ip_address("127.0.0.1")]
    assert await destinations.system_resolver("0x7f.1", 443) == [ipaddress.ip_address("127.0.0.1")]
