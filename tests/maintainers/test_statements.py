"""Maintainers' statements (docs/domain.md "Maintainers"): a verified maintainer's statement is on every surface the
finding is on (the finding page and twin, the repository page and twin, SARIF out, OpenVEX out, the Atom feed, the
change feed, the bulk export), and a moderator's hide takes it off every one at the next request; OpenVEX's rules,
the secrets scan, who may state, and the quorum the statements never touch."""

from __future__ import annotations

import gzip
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import jsonschema_rs
import pytest
from bs4 import BeautifulSoup
from lib4vex.parser import VEXParser

from app.cli import build_parser
from app.exports import service as exports
from app.maintainers.statement_routes import MAX_BODY_BYTES
from app.moderation.service import change_scan_visibility, change_statement_visibility
from tests import factories
from tests.exports.support import records
from tests.harness import assert_one_line_error, tarakan
from tests.maintainers.statement_support import (
    Published,
    bearer,
    published,
    state,
    statements_url,
    verified_maintainer,
)
from tests.maintainers.support import Forge
from tests.moderation.support import NOTES, SAME_ORIGIN, act_as
from tests.reports.support import reach_quorum
from tests.site.test_openapi import _conforms as conforms
from tests.sql import execute, rows, scalar

OPENVEX_SCHEMA = json.loads((Path(__file__).parents[1] / "schemas" / "openvex_json_schema.json").read_text())
EXPORT_SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "schemas" / "finding.schema.json").read_text())
ATOM = "{http://www.w3.org/2005/Atom}"
IMPACT = "The redirect target is checked against the allow-list before this handler runs."
NOT_AFFECTED = {
    "status": "not_affected",
    "justification": "vulnerable_code_not_in_execute_path",
    "impact_statement": IMPACT,
}


def openvex_valid(document: dict[str, Any]) -> None:
    jsonschema_rs.validator_for(OPENVEX_SCHEMA, validate_formats=True).validate(document)  # draft 2020-12


async def statement_entries(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    page = await client.get("/api/v1/changes", params={"limit": 1000})
    assert page.status_code == 200, page.text
    return [e for e in page.json()["entries"] if e["kind"] == "finding.statement"]


async def surfaces(client: httpx.AsyncClient, p: Published) -> dict[str, Any]:
    """What every public surface says about the finding's statement right now (anonymous reads)."""
    repo = f"/repos/{p.slug}"
    finding_html = BeautifulSoup((await client.get(f"/findings/{p.occurrence}")).text, "html.parser")
    twin = (await client.get(f"/findings/{p.occurrence}.json")).json()
    record = (await client.get(f"{repo}.json")).json()
    sarif = (await client.get(f"{repo}/findings.sarif")).json()["runs"][0]["results"][0]
    vex = await client.get(f"{repo}/vex.json")
    atom = ElementTree.fromstring((await client.get(f"{repo}/reports.atom")).content)
    return {
        "page": finding_html.find(id="finding-statement"),
        "twin": twin["maintainer_statement"],
        "record": record["reports"][0]["findings"][0]["maintainer_statement"],
        "maintainers": record["maintainers"],
        "sarif": (sarif.get("suppressions"), sarif["properties"].get("maintainer_statement")),
        "vex": vex,
        "atom": [e for e in atom.iter(f"{ATOM}entry") if ":statement:" in (e.findtext(f"{ATOM}id") or "")],
    }


async def test_a_statement_is_everywhere_the_finding_is_and_a_hide_takes_it_off_everywhere(
    client: httpx.AsyncClient, forge: Forge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = await published()
    maintainer = await verified_maintainer(forge, p.repository, handle="keeper")
    headers = await bearer(maintainer)
    status_before = await scalar("SELECT status FROM canonical_findings WHERE public_id = :id", id=p.canonical)

    made = await state(client, p.canonical, headers, **NOT_AFFECTED)
    assert made.status_code == 201, made.text
    statement = made.json()["statement"]
    assert set(statement) == {
        "id", "canonical", "status", "justification", "impact_statement", "action_statement", "fixed_in", "author", "at",
    }  # fmt: skip
    assert (statement["canonical"], statement["author"], statement["fixed_in"]) == (p.canonical, "keeper", None)
    assert (statement["status"], statement["impact_statement"]) == ("not_affected", IMPACT)

    now = await surfaces(client, p)
    assert now["page"] is not None and "not affected" in now["page"].text and IMPACT in now["page"].text
    expected = {k: statement[k] for k in ("status", "justification", "impact_statement", "action_statement")}
    assert {k: now["twin"][k] for k in expected} == expected and now["twin"]["author"] == "keeper"
    assert now["record"] == now["twin"]
    assert [m["handle"] for m in now["maintainers"]] == ["keeper"] and now["maintainers"][0]["since"]
    suppressions, properties = now["sarif"]
    assert suppressions == [
        {"kind": "external", "status": "accepted", "justification": f"vulnerable_code_not_in_execute_path: {IMPACT}"}
    ]
    assert properties["status"] == "not_affected"
    assert now["vex"].status_code == 200, now["vex"].text
    assert now["vex"].headers["etag"] and now["vex"].headers["cache-control"] == "public, max-age=30, s-maxage=300"
    document = now["vex"].json()
    openvex_valid(document)
    (vex_statement,) = document["statements"]
    assert vex_statement["vulnerability"]["name"] == p.canonical
    assert vex_statement["vulnerability"]["@id"].endswith(f"/findings/{p.occurrence}")
    # both given: the justification stays, the impact statement goes into the notes (OpenVEX takes one of the two)
    assert vex_statement["justification"] == "vulnerable_code_not_in_execute_path"
    assert "impact_statement" not in vex_statement and IMPACT in vex_statement["status_notes"]
    owner, name = p.repository.owner, p.repository.name
    assert vex_statement["products"] == [
        {"@id": f"pkg:github/{owner}/{name}", "identifiers": {"purl": f"pkg:github/{owner}/{name}"}}
    ]
    cached = await client.get(f"/repos/{p.slug}/vex.json", headers={"If-None-Match": now["vex"].headers["etag"]})
    assert cached.status_code == 304
    parsed = tmp_path / "vex.json"
    parsed.write_bytes(now["vex"].content)
    parser = VEXParser("openvex")
    parser.parse(str(parsed))
    assert parser.get_metadata()["role"] and parser.get_metadata()["version"] >= 1
    assert [(v["id"], v["status"]) for v in parser.get_vulnerabilities()] == [(p.canonical, "not_affected")]
    assert len(now["atom"]) == 1 and "not affected" in (now["atom"][0].findtext(f"{ATOM}title") or "")
    (entry,) = await statement_entries(client)
    assert entry["canonical"] == p.canonical
    assert (entry["status"], entry["justification"]) == ("not_affected", "vulnerable_code_not_in_execute_path")
    monkeypatch.setenv("EXPORT_DIR", str(tmp_path / "exports"))
    exports.clear_caches()
    await exports.rebuild_export()
    (before_hide,) = exports.list_exports()
    (exported,) = records(before_hide.path, "findings.ndjson.gz")
    served = await client.get("/exports/findings.ndjson.gz")
    assert served.status_code == 200 and IMPACT.encode() in gzip.decompress(served.content)
    jsonschema_rs.validator_for(EXPORT_SCHEMA, validate_formats=True).validate(exported)
    assert exported["maintainer_statement"]["status"] == "not_affected"
    assert exported["maintainer_statement"]["author"] == "keeper"
    # the reviewers' quorum is not the maintainers' to move
    assert await scalar("SELECT status FROM canonical_findings WHERE public_id = :id", id=p.canonical) == status_before

    # a moderator hides it: gone from every surface at the next request
    moderator = await factories.create_account(platform_role="moderator")
    await act_as(client, moderator)
    moderated = BeautifulSoup((await client.get(f"/findings/{p.occurrence}")).text, "html.parser")
    assert moderated.find("form", action=f"/moderation/statements/{statement['id']}") is not None
    hidden = await client.post(
        f"/moderation/statements/{statement['id']}",
        headers=SAME_ORIGIN,
        data={"visibility": "hidden", "reason": "defamatory", "notes": NOTES},
    )
    assert hidden.status_code == 303, hidden.text
    assert hidden.headers["location"].startswith(f"/findings/{p.occurrence}?recorded=")
    audit = await rows("SELECT action, subject_type, subject_id, before, after FROM audit_events")
    assert audit == [
        {
            "action": "statement.visibility",
            "subject_type": "statement",
            "subject_id": str(statement["id"]),
            "before": {"visibility": "shown"},
            "after": {"visibility": "hidden"},
        }
    ]
    await act_as(client, None)

    gone = await surfaces(client, p)
    assert gone["page"] is None and IMPACT not in (await client.get(f"/findings/{p.occurrence}")).text
    assert gone["twin"] is None and gone["record"] is None
    assert gone["sarif"] == (None, None)
    assert gone["vex"].status_code == 404 and gone["vex"].json()["errors"]
    assert gone["atom"] == []
    earlier, hide = await statement_entries(client)
    assert earlier == {k: earlier[k] for k in ("seq", "at", "kind")} | {"canonical": p.canonical}  # redacted
    assert hide["canonical"] == p.canonical and hide["reason"] == "moderation" and "status" not in hide
    # the export taken before the hide holds it: it is stale (rebuilt, never served); a fresh one has none
    assert await exports.stale(before_hide)  # it holds the hidden statement: refused until rebuilt, then gone
    refused = await client.get("/exports/findings.ndjson.gz")
    assert refused.status_code == 503 and IMPACT not in refused.text
    assert await exports.export_due(datetime.now(UTC)) == "takedown"
    await exports.rebuild_export()
    (after_hide,) = exports.list_exports()  # the stale one is deleted
    assert [r["maintainer_statement"] for r in records(after_hide.path, "findings.ndjson.gz")] == [None]
    exports.clear_caches()
    assert await scalar("SELECT count(*) FROM finding_statements") == 1  # kept, hidden


async def test_the_newest_shown_statement_is_current_and_a_hide_brings_back_the_one_before(
    client: httpx.AsyncClient, forge: Forge
) -> None:
    p = await published(host="gitlab.com")
    headers = await bearer(await verified_maintainer(forge, p.repository))
    first = await state(client, p.canonical, headers, status="under_investigation")
    second = await state(
        client, p.canonical, headers, status="fixed", fixed_in="ABCDEF0123456789ABCDEF0123456789ABCDEF01"
    )
    assert (first.status_code, second.status_code) == (201, 201), second.text
    assert second.json()["statement"]["fixed_in"] == "abcdef0123456789abcdef0123456789abcdef01"
    twin = (await client.get(f"/findings/{p.occurrence}.json")).json()
    assert twin["maintainer_statement"]["status"] == "fixed"
    vex = (await client.get(f"/repos/{p.slug}/vex.json")).json()
    openvex_valid(vex)
    (only,) = vex["statements"]  # one statement per finding: its current one
    assert only["status"] == "fixed" and "abcdef0123456789abcdef0123456789abcdef01" in only["status_notes"]
    assert only["products"] == [{"@id": p.repository.canonical_url}]  # no purl type for GitLab
    version = vex["version"]
    sarif = (await client.get(f"/repos/{p.slug}/findings.sarif")).json()["runs"][0]["results"][0]
    assert "suppressions" not in sarif and sarif["properties"]["maintainer_statement"]["status"] == "fixed"

    moderator = await factories.create_account(platform_role="moderator")
    await change_statement_visibility(moderator, second.json()["statement"]["id"], "hidden", "wrong commit", NOTES)
    twin = (await client.get(f"/findings/{p.occurrence}.json")).json()
    assert twin["maintainer_statement"]["status"] == "under_investigation"
    after = (await client.get(f"/repos/{p.slug}/vex.json")).json()
    assert [s["status"] for s in after["statements"]] == ["under_investigation"] and after["version"] > version
    entries = await statement_entries(client)
    # the last entry about the finding names its current statement: a mirror applying them in order is right
    assert [e.get("status") for e in entries] == ["under_investigation", None, "under_investigation"]
    assert entries[-1]["reason"] == "moderation"

    await change_statement_visibility(moderator, second.json()["statement"]["id"], "shown", "it was right", NOTES)
    entries = await statement_entries(client)
    assert entries[-1]["status"] == "fixed" and "reason" not in entries[-1]
    assert (await client.get(f"/findings/{p.occurrence}.json")).json()["maintainer_statement"]["status"] == "fixed"


async def test_statements_follow_a_takedown_of_the_finding(client: httpx.AsyncClient, forge: Forge) -> None:
    p = await published()
    headers = await bearer(await verified_maintainer(forge, p.repository))
    assert (
        await state(client, p.canonical, headers, status="affected", action_statement="Upgrade to 2.1.")
    ).status_code == 201
    moderator = await factories.create_account(platform_role="moderator")
    await change_scan_visibility(moderator, p.report["id"], "restricted", "takedown", NOTES)
    assert (await client.get(f"/repos/{p.slug}/vex.json")).status_code == 404
    (entry,) = await statement_entries(client)
    assert set(entry) == {"seq", "at", "kind", "canonical"}  # the finding is not public: the entry says nothing
    # a finding that is not public is a 404 for the maintainer too (before anything about the account)
    refused = await state(client, p.canonical, headers, status="under_investigation")
    assert refused.status_code == 404 and refused.json()["errors"] == {"finding": ["not found"]}


BAD: list[tuple[dict[str, Any], str]] = [
    ({}, "status"),
    ({"status": "exploited"}, "status"),
    ({"status": "not_affected"}, "justification"),
    ({"status": "not_affected", "justification": "it_is_fine"}, "justification"),
    ({"status": "not_affected", "impact_statement": "   "}, "justification"),
    ({"status": "affected"}, "action_statement"),
    ({"status": "affected", "action_statement": "Upgrade.", "justification": "component_not_present"}, "justification"),
    ({"status": "fixed", "impact_statement": "Fixed upstream."}, "impact_statement"),
    ({"status": "fixed", "fixed_in": "abc123"}, "fixed_in"),
    ({"status": "under_investigation", "fixed_in": "a" * 40}, "fixed_in"),
    ({"status": "affected", "action_statement": "x" * 2001}, "action_statement"),
    ({"status": "affected", "action_statement": "Upgrade.\x00"}, "action_statement"),
    ({"status": "not_affected", "impact_statement": ["not", "text"]}, "impact_statement"),
]


async def test_openvex_rules_secrets_and_who_may_state(client: httpx.AsyncClient, forge: Forge) -> None:
    p = await published()
    maintainer = await verified_maintainer(forge, p.repository)
    headers = await bearer(maintainer)
    for body, field in BAD:
        refused = await client.post(statements_url(p.canonical), headers=headers, json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert field in refused.json()["errors"], (body, refused.json())
    secret = await state(
        client, p.canonical, headers, status="affected", action_statement="Rotate AKIAABCDEFGHIJKLMNOP now."
    )
    assert secret.status_code == 422 and "AKIA" not in secret.text
    assert "an AWS access key id" in secret.json()["errors"]["action_statement"][0]

    stranger = await bearer(await factories.create_account())
    unknown = "00000000-0000-4000-8000-000000000000"
    # an unknown finding is a 404 before the 403 a non-maintainer gets on a real one
    assert (await state(client, unknown, stranger, status="under_investigation")).status_code == 404
    assert (await state(client, "not-a-uuid", stranger, status="under_investigation")).status_code == 404
    forbidden = await state(client, p.canonical, stranger, status="under_investigation")
    assert forbidden.status_code == 403 and "maintainer" in forbidden.json()["errors"]["account"][0]
    other = await published()  # maintaining one repository says nothing about another
    assert (await state(client, other.canonical, headers, status="under_investigation")).status_code == 403
    no_scope = await bearer(maintainer, "findings:submit")
    assert (await state(client, p.canonical, no_scope, status="under_investigation")).status_code == 403
    suspended = await verified_maintainer(forge, p.repository)
    suspended_headers = await bearer(suspended)
    await execute("UPDATE accounts SET state = 'restricted' WHERE id = :id", id=suspended.id)
    assert (await state(client, p.canonical, suspended_headers, status="under_investigation")).status_code == 403
    assert await scalar("SELECT count(*) FROM finding_statements") == 0
    assert await scalar("SELECT count(*) FROM changes WHERE kind = 'finding.statement'") == 0


async def test_a_statement_never_moves_the_quorum(client: httpx.AsyncClient, forge: Forge) -> None:
    p = await published()
    await reach_quorum(p.canonical, "confirmed")
    headers = await bearer(await verified_maintainer(forge, p.repository))
    made = await state(client, p.canonical, headers, status="not_affected", justification="component_not_present")
    assert made.status_code == 201
    twin = (await client.get(f"/findings/{p.occurrence}.json")).json()
    # both voices side by side: the reviewers verified it, the maintainers say it does not affect them
    assert twin["finding"]["status"] == "verified" and twin["maintainer_statement"]["status"] == "not_affected"


@pytest.mark.parametrize("as_moderator", [False, True])
async def test_the_statement_form_on_the_finding_page(
    client: httpx.AsyncClient, forge: Forge, as_moderator: bool
) -> None:
    p = await published()
    page = f"/findings/{p.occurrence}"
    anonymous = await client.get(page)
    assert anonymous.headers["cache-control"] == "public, max-age=30, s-maxage=300"
    assert BeautifulSoup(anonymous.text, "html.parser").find(id="statement-form") is None
    extra = {"platform_role": "moderator"} if as_moderator else {}
    maintainer = await verified_maintainer(forge, p.repository, **extra)
    await act_as(client, maintainer)
    mine = await client.get(page)
    assert mine.status_code == 200 and mine.headers["cache-control"] == "private, no-store"
    form = BeautifulSoup(mine.text, "html.parser").find(id="statement-form")
    assert form is not None and form["action"] == f"{page}/statements"
    for control in form.find_all(["select", "textarea", "input"]):  # every field has its label
        assert control.get("type") == "hidden" or form.find("label", attrs={"for": control["id"]}) is not None

    refused = await client.post(f"{page}/statements", headers=SAME_ORIGIN, data={"status": "affected"})
    assert refused.status_code == 422 and refused.headers["cache-control"] == "private, no-store"
    html = BeautifulSoup(refused.text, "html.parser")
    errors, status = html.find(id="statement-errors"), html.find(id="statement-status-field")
    assert errors is not None and "action_statement" in errors.text
    chosen = status.find("option", selected=True) if status is not None else None
    assert chosen is not None and chosen["value"] == "affected"  # what was typed
    forged = await client.post(f"{page}/statements", headers={"Origin": "https://evil.example"}, data={})
    assert forged.status_code == 403
    made = await client.post(
        f"{page}/statements",
        headers=SAME_ORIGIN,
        data={"status": "affected", "action_statement": "Upgrade to 2.1.", "justification": "", "fixed_in": ""},
    )
    assert made.status_code == 303 and made.headers["location"] == f"{page}?stated=1#maintainer-statement"
    shown = BeautifulSoup((await client.get(made.headers["location"])).text, "html.parser").find(id="finding-statement")
    assert shown is not None and "Upgrade to 2.1." in shown.text
    assert await scalar("SELECT count(*) FROM finding_statements") == 1

    await act_as(client, await factories.create_account())  # signed in, maintains nothing: no form, shared cache
    other = await client.get(page)
    assert other.headers["cache-control"] == "public, max-age=30, s-maxage=300"
    assert BeautifulSoup(other.text, "html.parser").find(id="statement-form") is None
    assert (await client.post(f"{page}/statements", headers=SAME_ORIGIN, data={"status": "affected"})).status_code in (
        403,
        422,
    )


async def test_tarakan_statements_add(forge: Forge, capsys: pytest.CaptureFixture[str]) -> None:
    p = await published()
    maintainer = await verified_maintainer(forge, p.repository)
    argv = ["statements", "add", p.canonical, "--status", "not_affected", "--impact", IMPACT, "--as", maintainer.email]
    args = build_parser().parse_args(argv)  # the real parser and handler, in this process
    assert await args.handler(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["statement"]["impact_statement"] == IMPACT and printed["statement"]["justification"] is None
    refused = await tarakan("statements", "add", p.canonical, "--status", "affected", "--as", maintainer.email)
    assert_one_line_error(refused, "action_statement")
    assert await scalar("SELECT count(*) FROM finding_statements") == 1


async def test_hostile_statement_bodies_are_refused_quickly(client: httpx.AsyncClient, forge: Forge) -> None:
    """The hostile corpus fills bodies to the API's limit, past this route's 16 KiB: here are its shapes under it."""
    p = await published()
    headers = {**await bearer(await verified_maintainer(forge, p.repository)), "Content-Type": "application/json"}
    url = statements_url(p.canonical)
    limit = MAX_BODY_BYTES
    many_keys = "{" + ",".join(f'"k{i}":0' for i in range(limit // 10)) + "}"
    bodies: list[tuple[bytes, int]] = [
        (b"[" * 33 + b"]" * 33, 400),  # one level past the depth bound
        (many_keys[: limit - 1].rsplit(",", 1)[0].encode() + b"}", 422),  # no status among thousands of keys
        (json.dumps({"status": "affected", "action_statement": "\ud800"}).encode(), 422),  # a lone surrogate
        (json.dumps({"status": "affected", "action_statement": "eyJ" * 2000}).encode(), 422),  # too long
        (json.dumps({"status": "affected", "action_statement": ("eyJ" + "a" * 9 + ".") * 150}).encode(), 422),  # a JWT
        (json.dumps({"status": "affected", "action_statement": ("eyJ" + "a" * 7 + ".") * 180}).encode(), 201),
        (b"{" + b" " * limit + b"}", 413),  # one byte over
    ]
    for body, expected in bodies:
        started = time.monotonic()
        answer = await client.post(url, headers=headers, content=body)
        assert answer.status_code == expected, (body[:60], answer.text[:200])
        assert time.monotonic() - started < 2


async def test_the_statement_answers_conform_to_the_openapi_document(client: httpx.AsyncClient, forge: Forge) -> None:
    document = (await client.get("/api/v1/openapi.json")).json()
    p = await published()
    headers = await bearer(await verified_maintainer(forge, p.repository))
    path = "/api/v1/findings/{canonical_public_id}/statements"
    made = await state(client, p.canonical, headers, status="affected", action_statement="Upgrade to 2.1.")
    assert made.status_code == 201
    conforms(document, path, "post", made)
    refused = await state(client, p.canonical, headers, status="not_affected")
    assert refused.status_code == 422
    conforms(document, path, "post", refused)
    vex = await client.get(f"/repos/{p.slug}/vex.json")
    conforms(document, "/repos/{host}/{owner}/{name}/vex.json", "get", vex)
    conforms(document, "/findings/{ref}.json", "get", await client.get(f"/findings/{p.occurrence}.json"))
    conforms(document, "/repos/{host}/{owner}/{name}.json", "get", await client.get(f"/repos/{p.slug}.json"))
    feed = await client.get("/api/v1/changes")
    assert any(e["kind"] == "finding.statement" for e in feed.json()["entries"])
    conforms(document, "/api/v1/changes", "get", feed)
