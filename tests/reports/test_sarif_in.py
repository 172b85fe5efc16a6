"""SARIF 2.1.0 in (docs/sarif.md): Bandit's real output over a small vulnerable tree, CodeQL- and Semgrep-shaped
logs, the API (`Content-Type: application/sarif+json`) and the CLI (recognised by content), errors naming the JSON
path with nothing written, and the per-report limit."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.kernel import db
from app.kernel.errors import ValidationError
from app.reports.sarif import SARIF_MEDIA_TYPE, is_sarif, sarif_to_report
from tests import factories
from tests.harness import assert_one_line_error, tarakan
from tests.reports.support import row_counts
from tests.reports.test_reports_api import reports_url, token_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CODEQL = FIXTURES / "sarif" / "codeql.sarif.json"
SEMGREP = FIXTURES / "sarif" / "semgrep.sarif"
BANDIT_SAMPLE = FIXTURES / "bandit_sample"
COMMIT = "c" * 40


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


async def bandit_log() -> dict[str, Any]:
    """Bandit (installed from PyPI with its SARIF formatter) over the sample tree, as a CI job would run it."""
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "bandit"),
        "-q", "-r", ".", "-f", "sarif",
        cwd=BANDIT_SAMPLE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 1, err  # 1: issues found
    data: dict[str, Any] = json.loads(out)
    return data


async def stored_findings() -> list[dict[str, Any]]:
    async with db.read_session(replica=False) as session:
        rows = await session.execute(
            text(
                "SELECT f.file_path, f.line_start, f.line_end, f.severity, f.title, f.description, "
                "f.partial_fingerprints, s.commit_sha, s.model, s.prompt_version, s.provenance "
                "FROM scan_findings f JOIN scans s ON s.id = f.scan_id ORDER BY f.position"
            )
        )
        return [dict(r) for r in rows.mappings()]


async def post_sarif(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], log: dict[str, Any], **params: str
) -> httpx.Response:
    return await client.post(
        url, params=params, headers={**headers, "Content-Type": SARIF_MEDIA_TYPE}, content=json.dumps(log)
    )


async def test_bandit_output_goes_in_through_the_api(client: httpx.AsyncClient) -> None:
    log = await bandit_log()
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "widget")
    response = await post_sarif(client, reports_url(repo), await token_for(account), log, commit_sha=COMMIT)
    assert response.status_code == 201, response.text
    data = response.json()
    assert (data["commit_sha"], data["findings_count"], data["provenance"]) == (COMMIT, 6, "agent")
    assert data["sarif"] == {
        "results": 6,
        "findings": 6,
        "skipped": {"suppressed": 0, "absent": 0, "not_a_problem": 0, "no_location": 0},
        "truncated": {"titles": 0, "descriptions": 0},
    }
    stored = await stored_findings()
    assert {(f["file_path"], f["line_start"], f["severity"], f["title"]) for f in stored} == {
        ("webapp/config.py", 3, "low", "B403 blacklist"),
        ("webapp/config.py", 5, "low", "B105 hardcoded_password_string"),
        ("webapp/config.py", 9, "medium", "B301 blacklist"),
        ("webapp/db.py", 4, "low", "B404 blacklist"),
        ("webapp/db.py", 8, "medium", "B608 hardcoded_sql_expressions"),
        ("webapp/db.py", 13, "high", "B602 subprocess_popen_with_shell_equals_true"),
    }
    version = log["runs"][0]["tool"]["driver"]["version"]
    assert {(f["model"], f["prompt_version"]) for f in stored} == {(f"Bandit {version}", version)}
    shell = next(f for f in stored if f["title"].startswith("B602"))
    assert "shell=True" in shell["description"] and "bandit.readthedocs.io" in shell["description"]


async def test_codeql_log_by_cli_recognised_by_content(tmp_path: Path) -> None:
    await factories.create_account(email="ci@example.com", state="active")
    await factories.create_repository("acme", "widget")
    code, out, err = await tarakan("reports", "submit", "github.com/acme/widget", str(CODEQL), "--as", "ci@example.com")
    assert code == 0, err
    data = json.loads(out)
    # the commit from versionControlProvenance, lowercased; suppressed, absent and location-less results skipped
    assert (data["commit_sha"], data["findings_count"]) == ("0123456789abcdef0123456789abcdef01234567", 3)
    assert data["sarif"]["skipped"] == {"suppressed": 1, "absent": 1, "not_a_problem": 0, "no_location": 1}
    stored = await stored_findings()
    assert [(f["file_path"], f["line_start"], f["line_end"], f["severity"]) for f in stored] == [
        ("app/db.py", 8, 8, "high"),  # security-severity 8.8
        ("app/shell.py", 13, 14, "critical"),  # 9.8; the file through run.artifacts[1]
        ("app/auth flow.py", 21, 21, "high"),  # an absolute file URI under originalUriBaseIds, percent-decoded
    ]
    assert stored[0]["title"] == "SQL query built from user-controlled sources"
    assert stored[0]["partial_fingerprints"] == {
        "primaryLocationLineHash": "4f7a3b2c1d0e9f8a:1",
        "primaryLocationStartColumnFingerprint": "23",
    }
    assert (stored[0]["model"], stored[0]["prompt_version"]) == ("CodeQL 2.15.3", "codeql/python-queries 0.9.4+abc123")


async def test_semgrep_log_needs_a_commit_and_long_titles_are_cut(client: httpx.AsyncClient) -> None:
    log = load(SEMGREP)
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "widget")
    headers = await token_for(account)
    missing = await post_sarif(client, reports_url(repo), headers, log)
    assert missing.status_code == 422
    assert "commit_sha" in missing.json()["errors"]
    assert (await row_counts())["scans"] == 0
    response = await post_sarif(client, reports_url(repo), headers, log, commit_sha=COMMIT.upper())
    assert response.status_code == 201, response.text
    assert response.json()["sarif"]["truncated"] == {"titles": 1, "descriptions": 0}
    stored = await stored_findings()
    assert [(f["file_path"], f["line_start"], f["line_end"], f["severity"]) for f in stored] == [
        ("app/views.py", 12, 13, "high"),  # defaultConfiguration.level error
        ("app/api/payloads.py", 30, 30, "medium"),  # warning
    ]
    assert len(stored[1]["title"]) == 200 and stored[1]["title"].endswith("…")
    assert stored[0]["partial_fingerprints"] is None  # Semgrep writes `fingerprints`, not partial ones


def codeql_with(change: Any) -> dict[str, Any]:
    log = copy.deepcopy(load(CODEQL))
    change(log["runs"][0])
    return log


@pytest.mark.parametrize(
    ("change", "path", "fragment"),
    [
        (
            lambda run: run["results"][1]["locations"][0]["physicalLocation"]["region"].update(startLine=0),
            "runs[0].results[1].locations[0].physicalLocation.region.startLine",
            "at least 1",
        ),
        (
            lambda run: run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"].update(
                uri="../../etc/passwd"
            ),
            "runs[0].results[0].locations[0].physicalLocation.artifactLocation.uri",
            "..",
        ),
        (
            lambda run: run["results"][2]["locations"][0]["physicalLocation"]["artifactLocation"].update(
                uri="file:///elsewhere/app.py"
            ),
            "runs[0].results[2].locations[0].physicalLocation.artifactLocation.uri",
            "relative to the repository",
        ),
        (lambda run: run["results"][0].update(level="fatal"), "runs[0].results[0].level", "must be one of"),
        (
            lambda run: run["results"][0].update(message={"text": "bad \x00 byte"}),
            "runs[0].results[0].message",
            "control characters",
        ),
        (
            lambda run: run["versionControlProvenance"][0].update(revisionId="main"),
            "runs[0].versionControlProvenance[0].revisionId",
            "40 hexadecimal",
        ),
    ],
)
async def test_errors_name_the_json_path_and_write_nothing(
    client: httpx.AsyncClient, change: Any, path: str, fragment: str
) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "widget")
    response = await post_sarif(client, reports_url(repo), await token_for(account), codeql_with(change))
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert list(errors) == [path] and fragment in errors[path][0], errors
    assert (await row_counts())["scans"] == 0


async def test_a_log_over_the_report_limit_is_refused_with_both_numbers(client: httpx.AsyncClient) -> None:
    log = load(SEMGREP)
    result = log["runs"][0]["results"][0]
    log["runs"][0]["results"] = [
        copy.deepcopy(result) | {"locations": [{"physicalLocation": {"artifactLocation": {"uri": f"f{i}.py"}}}]}
        for i in range(201)
    ]
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "widget")
    response = await post_sarif(client, reports_url(repo), await token_for(account), log, commit_sha=COMMIT)
    assert response.status_code == 422
    message = response.json()["errors"]["runs"][0]
    assert "has 201 results" in message and "at most 200" in message, message
    assert (await row_counts())["scans"] == 0


def test_recognised_by_content_and_paths_resolved_through_base_chains() -> None:
    assert is_sarif(load(SEMGREP)) and not is_sarif({"version": "2.1.0"}) and not is_sarif({"document": {}})
    log = load(SEMGREP)
    run = log["runs"][0]
    run["originalUriBaseIds"] = {"SRC": {"uri": "src/", "uriBaseId": "ROOT"}, "ROOT": {"uri": "file:///w/repo/"}}
    run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"] = {"uri": "a%20b.py", "uriBaseId": "SRC"}
    run["versionControlProvenance"] = [{"repositoryUri": "https://github.com/acme/widget", "revisionId": COMMIT}]
    report = sarif_to_report(log)
    assert report.body["document"]["findings"][0]["file"] == "src/a b.py"
    with pytest.raises(ValidationError) as refused:
        sarif_to_report(log, commit_sha="d" * 40)  # the log names another commit
    assert list(refused.value.errors) == ["commit_sha"]


async def test_cli_refuses_a_commit_for_a_scan_format_body(tmp_path: Path) -> None:
    await factories.create_account(email="ci@example.com", state="active")
    await factories.create_repository("acme", "widget")
    body = tmp_path / "report.sarif"  # the name does not make it SARIF
    body.write_text(json.dumps({"commit_sha": COMMIT, "document": {"tarakan_scan_format": 1, "findings": []}}))
    result = await tarakan(
        "reports", "submit", "github.com/acme/widget", str(body), "--as", "ci@example.com", "--commit", COMMIT
    )
    assert_one_line_error(result, "commit")
    assert (await row_counts())["scans"] == 0


async def test_a_log_sent_as_json_is_told_its_content_type(client: httpx.AsyncClient) -> None:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository("acme", "widget")
    headers = {**await token_for(account), "Content-Type": "application/json"}
    response = await client.post(reports_url(repo), headers=headers, content=json.dumps(load(CODEQL)))
    assert response.status_code == 422
    assert list(response.json()["errors"]) == ["content_type"]
    assert "application/sarif+json" in response.json()["errors"]["content_type"][0]
    assert (await row_counts())["scans"] == 0
