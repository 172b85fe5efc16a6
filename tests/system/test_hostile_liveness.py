"""Liveness under a hostile report (docs/security.md): while one `tarakan serve` process scans a 2 MB report of
the shape that used to cost quadratic time, /healthz on the same process still answers. A generous 5 s bound: this
is a liveness test, the timings are bench/hostile_bench.py's."""

from __future__ import annotations

import json
import threading
import time

import httpx

from app.accounts.service import create_token
from tests import factories
from tests.harness import running_server


async def test_healthz_answers_while_a_2_mb_hostile_report_is_processed() -> None:
    account = await factories.create_account(state="active", platform_role="moderator")
    token = await create_token(account.id, ["findings:submit"])
    repo = await factories.create_repository()
    body = {
        "commit_sha": "a" * 40,
        "model": "m",
        "prompt_version": "v1",
        "document": {"tarakan_scan_format": 1, "findings": [], "meta": "-eyJ" * 475_000},
    }
    url = f"/api/v1/repos/{repo.host}/{repo.owner}/{repo.name}/reports"
    answer: dict[str, int] = {}
    with running_server() as base:

        def submit() -> None:
            response = httpx.post(
                base + url, content=json.dumps(body), headers={"Authorization": f"Bearer {token}"}, timeout=120
            )
            answer["status"] = response.status_code

        thread = threading.Thread(target=submit)
        thread.start()
        time.sleep(0.05)
        health = httpx.get(base + "/healthz", timeout=5)
        thread.join(120)
    assert health.status_code == 200
    assert answer.get("status") in (201, 422), answer
