"""The README's first session, run exactly as written (the block between its `first-session` markers) against a
live `tarakan serve` with the evidence gate on and the demo forge serving examples/forge, as `./run` starts them, so
the README cannot rot; and the worked examples it sends are valid by the product's own validation."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from app.devforge import DEMO_FORGE_URL, EXAMPLES_FORGE, FolderForge
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


def test_the_readmes_first_session_runs_as_written(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES_FORGE, tmp_path / "forge")  # the session moves a head: on a copy, as ./run does
    forge = FolderForge(tmp_path / "forge").start()
    gate = {"EVIDENCE_CHECK": "gate", DEMO_FORGE_URL: forge.url, **forge.settings()}
    server, base = start_server(gate, log=ROOT / "test-artifacts" / "readme-server.log")
    try:
        run = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", first_session()],
            cwd=ROOT,
            env={**os.environ, **gate, "BASE_URL": base},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop(server)
        forge.stop()
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

    # the gate: registration found the repositories on the forge, the report's finding is confirmed at its commit,
    # the same report to a repository without the file is a 422 naming that file (and the session went on)
    registered = [value for value in printed if value.get("canonical_url")]
    assert [(r["name"], r["metadata"], r["default_branch"]) for r in registered] == [
        ("widget", "found", "main"),
        ("gadget", "found", "main"),
    ]
    [report] = [value for value in printed if value.get("kind") == "report" and "sarif" not in value]
    assert report["findings"][0]["evidence"]["state"] == "confirmed"
    [refused] = [value for value in printed if "errors" in value]
    assert list(refused["errors"]) == ["findings[0].file"]
    assert " 422\n" in run.stdout
    # after the head moved, the finding's twin says the cited lines are not in the code there
    [twin] = [value for value in printed if "observations" in value]
    [seen] = twin["observations"]
    assert (seen["state"], seen["reason"], seen["commit"]) == (
        "absent",
        "lines_changed",
        "1f317ccef034bb060ebc6eed049a6aa1a8f5a316",
    )
