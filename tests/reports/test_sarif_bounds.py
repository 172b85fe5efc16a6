"""SARIF under hostile shapes and from real invocations (docs/sarif.md, docs/security.md "Body budget"): base
chains that name themselves or run deep are refused naming the base, a rule text shared by every result is read
only up to the description cap, and absolute `file:` URIs are made relative to the checkout root the caller names
(`?source_root=` on the API, `--source-root` on the CLI, the working directory by default)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from tests import factories
from tests.harness import assert_one_line_error, tarakan
from tests.reports.support import row_counts
from tests.reports.test_reports_api import reports_url, token_for
from tests.reports.test_sarif_in import BANDIT_SAMPLE, COMMIT, post_sarif, stored_findings

BANDIT_PATHS = {"webapp/config.py", "webapp/db.py"}


def _log(results: list[dict[str, Any]], **run: Any) -> dict[str, Any]:
    driver = {"name": "probe", "version": "1", "rules": [{"id": "R1", "shortDescription": {"text": "Rule one"}}]}
    return {"version": "2.1.0", "runs": [{"tool": {"driver": driver}, "results": results, **run}]}


def _result(uri: str, base: str | None = None) -> dict[str, Any]:
    location: dict[str, Any] = {"uri": uri} if base is None else {"uri": uri, "uriBaseId": base}
    return {
        "ruleId": "R1",
        "message": {"text": "m"},
        "locations": [{"physicalLocation": {"artifactLocation": location, "region": {"startLine": 1}}}],
    }


async def _submit(client: httpx.AsyncClient, log: dict[str, Any], **params: str) -> httpx.Response:
    account = await factories.create_account(state="active")
    repo = await factories.create_repository()
    return await post_sarif(client, reports_url(repo), await token_for(account), log, commit_sha=COMMIT, **params)


async def test_a_base_that_names_itself_is_refused_naming_it(client: httpx.AsyncClient) -> None:
    results = [_result("app.py", "B")] * 200
    long_cycle = _log(results, originalUriBaseIds={"B": {"uri": "./" * 50_000, "uriBaseId": "B"}})  # 133 kB
    response = await _submit(client, long_cycle)
    assert response.status_code == 422
    assert list(response.json()["errors"]) == ["runs[0].originalUriBaseIds.B.uri"]
    short_cycle = _log(results, originalUriBaseIds={"B": {"uri": "src/", "uriBaseId": "B"}})
    response = await _submit(client, short_cycle)
    assert response.status_code == 422
    assert "no cycle" in response.json()["errors"]["runs[0].originalUriBaseIds.B"][0]
    assert (await row_counts())["scans"] == 0


async def test_a_deep_chain_of_bases_is_refused_naming_the_base(client: httpx.AsyncClient) -> None:
    bases = {f"B{i}": {"uri": f"d{i}/", "uriBaseId": f"B{i + 1}"} for i in range(40)}
    response = await _submit(client, _log([_result("app.py", "B0")], originalUriBaseIds=bases))
    assert response.status_code == 422
    assert "within 16 steps" in response.json()["errors"]["runs[0].originalUriBaseIds.B0"][0]


async def test_a_chain_within_bounds_still_prefixes_the_path(client: httpx.AsyncClient) -> None:
    bases = {"SRC": {"uri": "src/", "uriBaseId": "ROOT"}, "ROOT": {"uri": "pkg/"}}
    response = await _submit(client, _log([_result("app.py", "SRC")], originalUriBaseIds=bases))
    assert response.status_code == 201, response.text
    assert [f["file_path"] for f in await stored_findings()] == ["pkg/src/app.py"]


async def test_a_huge_rule_text_shared_by_every_result_is_cut_to_the_caps(client: httpx.AsyncClient) -> None:
    log = _log([_result(f"f{i}.py") for i in range(100)])
    log["runs"][0]["tool"]["driver"]["rules"][0]["shortDescription"] = {"text": "x" * 1_000_000}
    log["runs"][0]["tool"]["driver"]["rules"][0]["help"] = {"text": "h" * 1_000_000}
    response = await _submit(client, log)
    assert response.status_code == 201, response.text
    assert response.json()["sarif"]["truncated"] == {"titles": 100, "descriptions": 100}


async def _bandit_absolute() -> dict[str, Any]:
    """Bandit as most people run it: on an absolute path (its URIs are absolute `file:` URIs, with no base)."""
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "bandit"), "-q", "-r", str(BANDIT_SAMPLE), "-f", "sarif",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 1, err
    data: dict[str, Any] = json.loads(out)
    assert "originalUriBaseIds" not in data["runs"][0]
    return data


async def test_bandit_on_an_absolute_path_goes_in_relative_to_the_named_root(client: httpx.AsyncClient) -> None:
    log = await _bandit_absolute()
    response = await _submit(client, log, source_root=str(BANDIT_SAMPLE))
    assert response.status_code == 201, response.text
    assert {f["file_path"] for f in await stored_findings()} == BANDIT_PATHS


async def test_absolute_uris_without_a_root_or_outside_it_are_refused_naming_how(client: httpx.AsyncClient) -> None:
    log = await _bandit_absolute()
    without = await _submit(client, log)
    assert without.status_code == 422
    ((where, (message,)),) = without.json()["errors"].items()
    assert where == "runs[0].results[0].locations[0].physicalLocation.artifactLocation.uri"
    assert "?source_root=" in message and "--source-root" in message
    outside = await _submit(client, log, source_root=str(BANDIT_SAMPLE / "webapp" / "nested"))
    assert outside.status_code == 422
    assert "lies outside the checkout root" in outside.json()["errors"][where][0]
    assert (await row_counts())["scans"] == 0


async def test_the_cli_takes_source_root_or_the_working_directory(tmp_path: Path) -> None:
    await factories.create_account(email="ci@example.com", state="active")
    await factories.create_repository("acme", "widget")
    log = await _bandit_absolute()
    log_file = tmp_path / "bandit.sarif"
    log_file.write_text(json.dumps(log))
    args = ("reports", "submit", "github.com/acme/widget", str(log_file), "--as", "ci@example.com", "--commit", COMMIT)
    named = await tarakan(*args, "--source-root", str(BANDIT_SAMPLE))
    assert named.code == 0, named.err
    assert {f["file_path"] for f in await stored_findings()} == BANDIT_PATHS
    # without --source-root: the working directory (the project folder, which holds the sample tree)
    here = await tarakan(*args[:-2], "--commit", "d" * 40)
    assert here.code == 0, here.err
    assert {f["file_path"] for f in await stored_findings()} >= {
        "tests/fixtures/bandit_sample/" + p for p in BANDIT_PATHS
    }
    # URIs outside the working directory and no --source-root: the error says how to name the root
    elsewhere = json.loads(log_file.read_text().replace(f"file://{BANDIT_SAMPLE}", "file:///elsewhere/checkout"))
    log_file.write_text(json.dumps(elsewhere))
    assert_one_line_error(await tarakan(*args), "--source-root")


async def test_logs_past_github_code_scanning_limits_are_refused_naming_the_part(client: httpx.AsyncClient) -> None:
    log = _log([_result("app.py")])
    log["runs"] = log["runs"] * 21
    response = await _submit(client, log)
    assert response.status_code == 422
    assert "at most 20 runs" in response.json()["errors"]["runs"][0]
    many = _log([{}] * 25_001)
    response = await _submit(client, many)
    assert response.status_code == 422
    assert "at most 25000 results" in response.json()["errors"]["runs[0].results"][0]
