"""`tarakan reports submit HOST/OWNER/NAME FILE --as EMAIL` as a real process: prints the 201 JSON, or one
error line and exit status 1 with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.kernel.errors import ValidationError
from app.kernel.refs import parse_ref
from app.reports.cli import read_body
from tests import factories
from tests.harness import assert_one_line_error, tarakan
from tests.reports.support import finding, report_body, row_counts


async def test_submit_from_a_file_prints_the_report(tmp_path: Path) -> None:
    await factories.create_account(email="agent@example.com", state="active")
    await factories.create_repository("acme", "widget")
    body = tmp_path / "report.json"
    body.write_text(json.dumps(report_body(findings=[finding(), finding(title="XSS in template")], run_id="cli-1")))
    code, out, err = await tarakan(
        "reports", "submit", "github.com/acme/widget", str(body), "--as", "Agent@Example.com"
    )
    assert code == 0, err
    data = json.loads(out)
    assert (data["repository"], data["run_id"], data["findings_count"]) == ("acme/widget", "cli-1", 2)
    assert [f["disposition"] for f in data["findings"]] == ["new", "new"]
    assert (await row_counts())["scans"] == 1


async def test_submit_from_stdin() -> None:
    await factories.create_account(email="agent@example.com", state="active")
    await factories.create_repository("acme", "widget")
    code, out, err = await tarakan(
        "reports", "submit", "github.com/acme/widget", "-", "--as", "agent@example.com",
        stdin=json.dumps(report_body()).encode(),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["kind"] == "report"


async def test_errors_exit_1_with_one_line_and_write_nothing(tmp_path: Path) -> None:
    await factories.create_account(email="agent@example.com", state="active")
    await factories.create_repository("acme", "widget")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(report_body(findings=[finding(line_start=0)])))
    good = tmp_path / "good.json"  # a body is validated before the repository is looked up (docs/security.md)
    good.write_text(json.dumps(report_body()))
    cases = [
        (("github.com/acme/widget", str(bad), "--as", "agent@example.com"), "findings[0].line_start"),
        (("github.com/acme/widget", str(bad), "--as", "nobody@example.com"), "no account"),
        (("github.com/acme/nothing", str(good), "--as", "agent@example.com"), "repository"),
    ]
    for args, expected in cases:
        result = await tarakan("reports", "submit", *args)
        assert_one_line_error(result, expected)
        assert result.out == "", args
    assert (await row_counts())["scans"] == 0


def test_arguments_and_files_are_checked_before_anything_runs(tmp_path: Path) -> None:
    assert parse_ref("github.com/acme/widget/") == ("github.com", "acme", "widget")
    with pytest.raises(ValidationError, match="HOST/OWNER/NAME"):
        parse_ref("acme/widget")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    for path, message in (
        (broken, "must hold valid JSON"),
        (listed, "must hold a JSON object"),
        (tmp_path / "missing.json", "cannot be read"),
    ):
        with pytest.raises(ValidationError) as info:
            read_body(str(path))
        assert message in info.value.errors["file"][0]
