"""Hostile reports (docs/security.md): the secrets scanner also reads model, prompt_version and run_id, runs before
any transaction (no lock waits on it), refuses a field it cannot scan within its budget,
and keeps its verdicts on the pathological shapes that used to cost quadratic time; text fields carrying NUL,
control characters or unpaired surrogates are a 422 naming the field; nothing is written on any refusal."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from app.kernel import db
from app.kernel.errors import ValidationError
from app.reports.checks import record_check
from app.reports.secrets_scanner import find_secret, scan_fields
from app.reports.service import submit_report
from tests import factories
from tests.reports.support import check_body, finding, report_body, reviewer, row_counts

UNCLEAN = "must not contain NUL, control characters or unpaired surrogates"
AWS = "AKIAIOSFODNN7EXAMPLE"


@pytest.mark.parametrize("field", ["model", "prompt_version", "run_id"])
async def test_a_secret_in_a_label_is_refused(field: str) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    with pytest.raises(ValidationError) as info:
        await submit_report(account, repo.host, repo.owner, repo.name, report_body(None, **{field: f"x {AWS}"}))
    assert list(info.value.errors) == [field]
    assert "AWS access key" in info.value.errors[field][0]
    assert all(count == 0 for count in (await row_counts()).values())


async def test_a_report_is_scanned_before_its_transaction_takes_the_account_lock() -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    async with db.transaction() as session:  # another request of the account holds its row
        await session.execute(text("SELECT 1 FROM accounts WHERE id = :id FOR UPDATE"), {"id": account.id})
        with pytest.raises(ValidationError):
            body = report_body(notes=f"found {AWS}")
            await asyncio.wait_for(submit_report(account, repo.host, repo.owner, repo.name, body), timeout=5)


def test_a_field_not_scanned_within_the_budget_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError) as info:
        scan_fields({"notes": "harmless", "document": {"findings": []}}, budget=0)
    assert info.value.errors == {"notes": ["could not be checked for secrets in time; send a smaller report"]}


def test_the_first_string_with_a_secret_is_named_among_many() -> None:
    document = {"findings": [{"title": f"t{i}", "description": "fine"} for i in range(500)]}
    document["findings"][321]["description"] = "leaked ghp_" + "A" * 36
    document["findings"][400]["title"] = f"leaked {AWS}"
    with pytest.raises(ValidationError) as info:
        scan_fields({"document": document})
    assert list(info.value.errors) == ["findings[321].description"]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("-eyJ" * 5000, None),  # the shape that cost quadratic time
        ("eyJaaaaaaaaa." * 2000, "a JSON Web Token"),
        ("a-eyJaaaaaaaaa.eyJaaaaaaaaa.aaaaaaaaaa", None),  # a token starts a run: no restart inside one
        ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w" + "-eyJ" * 2000, "a JSON Web Token"),
        ("-----BEGIN " + "A " * 5000 + "PRIVATE KEY-----", None),
        ("-----BEGIN EC PRIVATE KEY-----", "a private key"),
        ("api_key" + " " * 10_000 + "= " + "a" * 30, None),
        ("xoxb-" * 5000, "a Slack token"),
        ("xoxb-" + "!" * 20_000, None),
    ],
)
def test_pathological_shapes_keep_their_verdicts(text: str, kind: str | None) -> None:
    assert find_secret(text) == kind


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"notes": "nul \x00 here"}, "notes"),
        ({"model": "gpt\x00"}, "model"),
        ({"prompt_version": "v1\ud800"}, "prompt_version"),
        ({"run_id": "run\nid"}, "run_id"),
        ({"findings": [finding(title="t\x00")]}, "findings[0].title"),
        ({"findings": [finding(description="d\ud800")]}, "findings[0].description"),
        ({"document": {"tarakan_scan_format": 1, "findings": [], "meta": {"k": "\x1b[31m"}}}, "document.meta.k"),
        ({"document": {"tarakan_scan_format": 1, "findings": [], "\ud800": 1}}, "document"),
    ],
)
async def test_unclean_text_in_a_report_is_422_naming_the_field(overrides: dict[str, object], field: str) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    findings = overrides.pop("findings", None)
    body = report_body(findings, **overrides)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as info:
        await submit_report(account, repo.host, repo.owner, repo.name, body)
    assert field in info.value.errors, info.value.errors
    assert info.value.errors[field][0].startswith(UNCLEAN)
    assert all(count == 0 for count in (await row_counts()).values())


@pytest.mark.parametrize(("key", "value"), [("notes", "x" * 25 + "\x00"), ("evidence", "curl \ud800")])
async def test_unclean_text_in_a_check_is_422_naming_the_field(key: str, value: str) -> None:
    submitter = await factories.create_account(state="active")
    repo = await factories.create_repository()
    report = await submit_report(submitter, repo.host, repo.owner, repo.name, report_body())
    canonical = report["findings"][0]["canonical_public_id"]
    with pytest.raises(ValidationError) as info:
        await record_check(await reviewer(), canonical, check_body(**{key: value}))
    assert info.value.errors == {key: [UNCLEAN]}
