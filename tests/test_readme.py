"""The README's first session, run exactly as written (the block between its `first-session` markers) against a
live `tarakan serve`, so the README cannot rot; and the worked examples it sends are valid by the product's own
validation."""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

from app.reports.sarif import sarif_to_report
from app.reports.validation import validate_check, validate_report
from tests.harness import ROOT, start_server, stop

EXAMPLES = ROOT / "examples"


def first_session() -> str:
    found = re.search(
        r"<!-- first-session -->\n```bash\n(.*?)```\n<!-- /first-session -->", (ROOT / "README.md").read_text(), re.S
    )
    assert found, "README.md lost its first-session block"
    return found.group(1)


def answers(output: str) -> list[Any]:
    """Every JSON value the session printed, in order (the CLI's accounts and curl's answers)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := min((i for i in (output.find("{", at), output.find("[", at)) if i >= 0), default=-1)) >= 0:
        try:
            value, at = decoder.raw_decode(output, at)
            found.append(value)
        except json.JSONDecodeError:
            at += 1
    return found


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return data


def test_the_examples_are_valid_by_the_products_own_validation() -> None:
    report = validate_report(load("report.json"))
    check = validate_check(load("check.json"))
    assert (check.commit_sha, check.provenance) == (report.commit_sha, "human")  # so it can count
    log = load("bandit.sarif")
    assert log["runs"][0]["tool"]["driver"]["name"] == "Bandit"
    sarif = sarif_to_report(log, commit_sha=report.commit_sha)
    assert sarif.report is not None and sarif.results == len(sarif.report.findings) == 6


def test_the_readmes_first_session_runs_as_written() -> None:
    server, base = start_server(log=ROOT / "test-artifacts" / "readme-server.log")
    try:
        run = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", first_session()],
            cwd=ROOT,
            env={**os.environ, "BASE_URL": base},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop(server)
    assert run.returncode == 0, run.stdout + run.stderr
    printed = [value for value in answers(run.stdout) if isinstance(value, dict)]
    checks = [value for value in printed if "verdict" in value and "counted" in value]
    assert [(c["counted"], c["reason"], c["status"]) for c in checks] == [
        (True, None, "open"),
        (True, None, "verified"),
    ]
    [atlas] = [value for value in printed if "items" in value and "filters" in value]
    assert len(atlas["items"]) == 6 and {item["repo_count"] for item in atlas["items"]} == {2}
    [feed] = [value for value in printed if "entries" in value and "next_cursor" in value]
    assert {"repository.listed", "finding.published", "finding.status"} <= {e["kind"] for e in feed["entries"]}
