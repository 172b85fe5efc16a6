"""Typed answers on the JSON twins' hot path (issue 23 item 4): the bytes of four answers built the way the code did
before (dicts, then `jsonable()` and Starlette's `JSONResponse`) and the way it does now (the msgspec Structs of
each feature's `types.py`, encoded by `app.kernel.answers`), interleaved in one run; pydantic v2 models of the same
shapes beside them for the two atlas twins (the alternative the issue names). Every path must give the same bytes.

No database: the rows are shaped as the query modules return them (datetimes, UUIDs), sized as the pages are
(`/infestations.json` 50 items; the show twin 64 affected repositories and a 50-row ledger page; a repository's
record with 20 reports of 5 findings and 50 infestations; a report answer with 20 findings).

    .venv/bin/python -m bench.answers_bench [--runs 2000] [--no-write]

Writes bench/out/answers.json and its section of docs/benchmarks.md."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, Union, cast

import msgspec
import pydantic
from msgspec import inspect
from starlette.responses import JSONResponse

from app.disclosure.ledger import RepositoryDisclosures
from app.infestations.rows import Infestation, InfestationFilters, RepositoryInfestation, as_answer
from app.infestations.types import InfestationList, InfestationShow, affected_repository_page, instance_page
from app.kernel.answers import iso
from app.kernel.config import settings
from app.kernel.urls import finding_path, repo_path
from app.kernel.web import json_twin
from app.registry.types import public_repository
from app.reports.rows import RepositoryReport
from app.reports.serializers import finding_url, record_path, report_answer
from app.site import records
from app.site.types import Burden, RepositoryRecord
from bench.common import bench_parser, pct, publish

HEADING = "## Typed answers (bench/answers_bench.py)"
NOW = datetime(2026, 11, 30, 12, 34, 56, 789012, tzinfo=UTC)


# ---- rows as the query modules return them ----------------------------------------------------------------------


def _infestation_row(i: int) -> dict[str, Any]:
    return {
        "pattern_key": f"{i:064x}",
        "title": f"SQL injection in login handler {i}",
        "severity": "high",
        "sample_file_path": f"src/module_{i}/handlers.py",
        "sample_occurrence_public_id": str(uuid.UUID(int=i + 1)),
        "repo_count": 1000 - i,
        "instance_count": 2000 - i,
        "open_count": 900,
        "verified_count": 50,
        "fixed_count": 40,
        "disputed_count": 10,
        "last_seen_at": NOW - timedelta(hours=i),
        "first_seen_at": NOW - timedelta(days=300 + i),
    }


def _instance_row(i: int) -> dict[str, Any]:
    return {
        "id": 10_000 + i,
        "public_id": str(uuid.UUID(int=10_000 + i)),
        "occurrence_public_id": str(uuid.UUID(int=20_000 + i)),
        "status": "open",
        "severity": "high",
        "title": "SQL injection in login handler",
        "file_path": f"src/module_{i}/handlers.py",
        "detections_count": 3,
        "confirmations_count": 1,
        "host": "github.com",
        "owner": f"owner-{i}",
        "name": f"repo-{i}",
        "repository_id": 500 + i,
        "repository_uuid": str(uuid.UUID(int=40_000 + i)),
        "commit_sha": f"{i:040x}",
        "scan_id": 700 + i,
        "updated_at": NOW - timedelta(minutes=i),
    }


def _membership_row(i: int) -> dict[str, Any]:
    return {
        "id": 500 + i,
        "repository_id": 500 + i,
        "repository_uuid": str(uuid.UUID(int=40_000 + i)),
        "host": "github.com",
        "owner": f"owner-{i}",
        "name": f"repo-{i}",
        "status": "open",
        "severity": "high",
        "title": "SQL injection in login handler",
        "instance_count": 3,
        "open_count": 2,
        "occurrence_public_id": str(uuid.UUID(int=30_000 + i)),
        "updated_at": NOW - timedelta(minutes=i),
    }


def _repository_row() -> dict[str, Any]:
    return {
        "id": 42,
        "host": "github.com",
        "owner": "acme",
        "name": "widget",
        "canonical_url": "https://github.com/acme/widget",
        "status": "scanned",
        "scan_count": 20,
        "open_findings_count": 100,
        "verified_findings_count": 7,
        "last_scanned_at": NOW,
        "description": "A widget for every occasion",
        "primary_language": "Python",
        "stars_count": 1234,
        "forks_count": 56,
        "archived": False,
        "participation_mode": "observed",
        "listing_status": "listed",
        "default_branch": "main",
        "metadata_state": "found",
    }


def _report_row(i: int) -> dict[str, Any]:
    findings = [
        {
            "public_id": uuid.UUID(int=40_000 + 10 * i + j),
            "title": f"Finding {j} of report {i}",
            "severity": "medium",
            "file_path": f"lib/file_{j}.py",
            "line_start": 10 * j + 1,
            "line_end": 10 * j + 5,
            "status": "open",
            "pattern_key": f"{j:064x}",
        }
        for j in range(5)
    ]
    return {
        "id": 900 + i,
        "commit_sha": f"{i:040x}",
        "model": "gpt-5",
        "provenance": "agent",
        "review_kind": "code_review",
        "review_status": "accepted",
        "visibility": "public",
        "inserted_at": NOW - timedelta(days=i),
        "access": "full",
        "findings_count": 5,
        "findings": findings,
    }


def _repository_infestation_row(i: int) -> dict[str, Any]:
    return _infestation_row(i) | {
        "repository_instance_count": 2,
        "repository_open_count": 1,
        "repository_status": "open",
        "repository_occurrence_public_id": str(uuid.UUID(int=50_000 + i)),
    }


def _scan_row() -> dict[str, Any]:
    return {
        "id": 77,
        "commit_sha": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
        "model": "gpt-5",
        "prompt_version": "review/v3",
        "run_id": "run-2026-11-30-1",
        "provenance": "agent",
        "review_kind": "code_review",
        "findings_count": 20,
        "verified_at": None,
        "review_status": "quarantined",
        "visibility": "public",
        "host": "github.com",
        "owner": "acme",
        "name": "widget",
        "listing_status": "listed",
        "commit_committed_at": None,
        "pending": False,
    }


def _scan_finding_row(i: int) -> dict[str, Any]:
    return {
        "public_id": uuid.UUID(int=60_000 + i),
        "canonical_public_id": uuid.UUID(int=70_000 + i),
        "pattern_key": f"{i:064x}",
        "title": f"Finding {i}",
        "severity": "high",
        "disposition": "new",
        "evidence_state": "confirmed",
        "anchor": None,
        "held_reason": None,
    }


INFESTATIONS = [_infestation_row(i) for i in range(50)]
FILTERS: dict[str, Any] = {"days": 30, "min_repos": 2, "status": "all", "limit": 50, "counts_window_days": 30}
SHOW: dict[str, Any] = {
    "infestation": _infestation_row(0),
    "refreshed_at": NOW,
    "repositories": {"entries": [_membership_row(i) for i in range(64)], "next_cursor": "eyJ4IjoxfQ"},
    "instances": {"entries": [_instance_row(i) for i in range(50)], "next_cursor": "eyJ5IjoyfQ"},
}
REPOSITORY = _repository_row()
REPORTS = [_report_row(i) for i in range(20)]
REPORT_ROWS = [cast(RepositoryReport, r) for r in REPORTS]  # the "now" path's type: app.reports.queries' rows
REPOSITORY_INFESTATIONS = [_repository_infestation_row(i) for i in range(50)]
SCAN = _scan_row()
SCAN_FINDINGS = [_scan_finding_row(i) for i in range(20)]


# ---- before: dicts, jsonable(), JSONResponse (the code as of f31ffc4~) -----------------------------------------


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def _twin_before(data: Any) -> bytes:
    return bytes(JSONResponse(jsonable(data), headers={"Cache-Control": "public"}).body)


PUBLIC_REPOSITORY_FIELDS = tuple(k for k in REPOSITORY if k not in ("id", "default_branch", "metadata_state"))
# a report's header as the repository page's reads give it (app.reports.rows), in its order, less the count the old
# answer put after it and the viewer's access
REPORT_HEADER_FIELDS = tuple(
    k for k in RepositoryReport.__annotations__ if k not in ("findings_count", "access", "findings")
)


def _report_before(report: dict[str, Any]) -> dict[str, Any]:
    """As app/site/records.py built it, with the keys added since (issue 24's `maintainer_statement`, `maintainers`;
    evidence's `observation`): the same answer the old way."""
    header = {k: report[k] for k in REPORT_HEADER_FIELDS}
    if report["access"] != "full":
        return header
    findings = [
        {k: f[k] for k in ("public_id", "title", "severity", "file_path", "line_start", "line_end", "status")}
        | {"pattern_key": f["pattern_key"], "url": finding_path(f["public_id"]), "maintainer_statement": None}
        | {"observation": None}
        for f in report["findings"]
    ]
    return header | {"findings_count": report["findings_count"], "findings": findings}


def index_before() -> bytes:
    return _twin_before({"items": INFESTATIONS, "refreshed_at": NOW, "filters": FILTERS})


def show_before() -> bytes:
    return _twin_before(SHOW)


def record_before() -> bytes:
    path = repo_path(REPOSITORY["host"], REPOSITORY["owner"], REPOSITORY["name"])
    return _twin_before(
        {
            "repository": {k: REPOSITORY[k] for k in PUBLIC_REPOSITORY_FIELDS}
            | {"url": path, "default_branch": REPOSITORY["default_branch"], "metadata": REPOSITORY["metadata_state"]},
            "reports": [_report_before(r) for r in REPORTS],
            "infestations": REPOSITORY_INFESTATIONS,
            "maintainers": [],
            "burden": {"decided": 0, "disputed": 0, "refused": 0},  # keys added since: earned trust, disclosure
            "disclosures": {"embargoed": 0, "items": []},
        }
    )


def report_before() -> bytes:
    s = SCAN
    body = {
        "id": s["id"],
        "kind": "report",
        "repository": f"{s['owner']}/{s['name']}",
        "host": s["host"],
        "commit_sha": s["commit_sha"],
        "commit_committed_at": None,
        "model": s["model"],
        "prompt_version": s["prompt_version"],
        "run_id": s["run_id"],
        "provenance": s["provenance"],
        "provenance_attestation": "self_reported",
        "review_kind": s["review_kind"],
        "findings_count": s["findings_count"],
        "verified": s["verified_at"] is not None,
        "review_status": s["review_status"],
        "visibility": s["visibility"],
        "disclosed": s["visibility"] in ("public", "public_summary") and s["listing_status"] != "quarantined",
        "record_url": settings().base_url + record_path(s["host"], s["owner"], s["name"]),
        "findings": [
            {
                "public_id": str(f["public_id"]),
                "canonical_public_id": None if f["canonical_public_id"] is None else str(f["canonical_public_id"]),
                "pattern_key": f["pattern_key"],
                "title": f["title"],
                "severity": f["severity"],
                "disposition": f["disposition"],
                "url": finding_url(f["public_id"]),
                "evidence": {"state": f["evidence_state"], "commit": s["commit_sha"], "anchor": f["anchor"]},
                "held": f["held_reason"],
            }
            for f in SCAN_FINDINGS
        ],
    }
    return bytes(JSONResponse(body, status_code=201).body)


# ---- now: the Structs of app/*/types.py, as the routes and serializers build them ------------------------------


def index_now() -> bytes:
    filters = InfestationFilters(**FILTERS)
    answer = InfestationList(
        items=[as_answer(Infestation, i) for i in INFESTATIONS], refreshed_at=iso(NOW), filters=filters
    )
    return bytes(json_twin(answer).body)


def show_now() -> bytes:
    answer = InfestationShow(
        infestation=as_answer(Infestation, SHOW["infestation"]),
        refreshed_at=iso(SHOW["refreshed_at"]),
        repositories=affected_repository_page(SHOW["repositories"]),
        instances=instance_page(SHOW["instances"]),
    )
    return bytes(json_twin(answer).body)


def record_now() -> bytes:
    answer = RepositoryRecord(
        repository=public_repository(REPOSITORY),
        reports=[records._record_report(r, {}, {}) for r in REPORT_ROWS],
        infestations=[as_answer(RepositoryInfestation, i) for i in REPOSITORY_INFESTATIONS],
        maintainers=[],
        burden=Burden(decided=0, disputed=0, refused=0),
        disclosures=RepositoryDisclosures(embargoed=0, items=[]),
    )
    return bytes(json_twin(answer).body)


def report_now() -> bytes:
    from app.kernel.answers import answer_response

    return bytes(answer_response(report_answer(SCAN, SCAN_FINDINGS), status_code=201).body)


# ---- pydantic v2: the same shapes as BaseModels (validated on construction), the atlas twins only ---------------


def _pydantic_type(info: inspect.Type, models: dict[str, type[pydantic.BaseModel]]) -> Any:
    if isinstance(info, inspect.Metadata):
        return _pydantic_type(info.type, models)
    if isinstance(info, inspect.StructType):
        return pydantic_model(info.cls, models)
    if isinstance(info, inspect.ListType):
        return list[_pydantic_type(info.item_type, models)]  # type: ignore[misc]
    if isinstance(info, inspect.UnionType):
        return Union[tuple(_pydantic_type(t, models) for t in info.types)]  # noqa: UP007
    if isinstance(info, inspect.LiteralType):
        return Literal[tuple(info.values)]
    simple = {inspect.StrType: str, inspect.IntType: int, inspect.BoolType: bool, inspect.NoneType: type(None)}
    return simple[type(info)]


def pydantic_model(cls: type[msgspec.Struct], models: dict[str, type[pydantic.BaseModel]]) -> Any:
    """A closed pydantic model with the fields of an answer Struct (`extra="forbid"` as `forbid_unknown_fields`)."""
    if cls.__name__ not in models:
        info = inspect.type_info(cls)
        assert isinstance(info, inspect.StructType)
        fields: dict[str, Any] = {f.name: (_pydantic_type(f.type, models), ...) for f in info.fields}
        config = pydantic.ConfigDict(extra="forbid")
        models[cls.__name__] = pydantic.create_model(cls.__name__, __config__=config, **fields)
    return models[cls.__name__]


_MODELS: dict[str, type[pydantic.BaseModel]] = {}
P_LIST = pydantic_model(InfestationList, _MODELS)
P_SHOW = pydantic_model(InfestationShow, _MODELS)
P_INFESTATION, P_INSTANCE, P_AFFECTED = (_MODELS[n] for n in ("Infestation", "Instance", "AffectedRepository"))
P_FILTERS, P_INSTANCES, P_REPOSITORIES = (
    _MODELS[n] for n in ("InfestationFilters", "InstancePage", "AffectedRepositoryPage")
)


def _dated(row: dict[str, Any], *keys: str) -> dict[str, Any]:
    return row | {k: iso(row[k]) for k in keys}


def index_pydantic() -> bytes:
    items = [P_INFESTATION(**_dated(i, "last_seen_at", "first_seen_at")) for i in INFESTATIONS]
    answer = P_LIST(items=items, refreshed_at=iso(NOW), filters=P_FILTERS(**FILTERS))
    return answer.model_dump_json().encode()  # type: ignore[no-any-return]


def show_pydantic() -> bytes:
    repositories, instances = SHOW["repositories"], SHOW["instances"]
    answer = P_SHOW(
        infestation=P_INFESTATION(**_dated(SHOW["infestation"], "last_seen_at", "first_seen_at")),
        refreshed_at=iso(SHOW["refreshed_at"]),
        repositories=P_REPOSITORIES(
            entries=[P_AFFECTED(**_dated(r, "updated_at")) for r in repositories["entries"]],
            next_cursor=repositories["next_cursor"],
        ),
        instances=P_INSTANCES(
            entries=[P_INSTANCE(**_dated(r, "updated_at")) for r in instances["entries"]],
            next_cursor=instances["next_cursor"],
        ),
    )
    return answer.model_dump_json().encode()  # type: ignore[no-any-return]


CASES: dict[str, dict[str, Callable[[], bytes]]] = {
    "/infestations.json (50 items)": {"before": index_before, "msgspec": index_now, "pydantic": index_pydantic},
    "/infestations/{key}.json (64 repositories, 50 instances)": {
        "before": show_before,
        "msgspec": show_now,
        "pydantic": show_pydantic,
    },
    "/repos/{host}/{owner}/{name}.json (20 reports x 5 findings, 50 infestations)": {
        "before": record_before,
        "msgspec": record_now,
    },
    "report API answer (20 findings)": {"before": report_before, "msgspec": report_now},
}


def run(runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {"runs": runs, "cases": {}, "load_before": os.getloadavg()[0]}
    for name, paths in CASES.items():
        bodies = {path: build() for path, build in paths.items()}
        assert len(set(bodies.values())) == 1, f"{name}: the paths send different bytes"
        times: dict[str, list[float]] = {path: [] for path in paths}
        for _ in range(runs):  # interleaved: every path sees the same machine
            for path, build in paths.items():
                started = time.perf_counter()
                build()
                times[path].append(time.perf_counter() - started)
        results["cases"][name] = {
            "bytes": len(bodies["before"]),
            **{path: {"p50_us": statistics.median(t) * 1e6, "p95_us": pct(t, 0.95) * 1e6} for path, t in times.items()},
        }
    results["load_after"] = os.getloadavg()[0]
    return results


def render(results: dict[str, Any], command: str) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `{command}` (in process, rows shaped as the query modules return them, the paths interleaved, "
        f"the same bytes from each, checked; load average {results['load_before']:.1f}-{results['load_after']:.1f}: "
        "read the medians). Wall times in µs, p50 / p95.",
        "",
        "| answer | bytes | before: dicts + jsonable + JSONResponse | msgspec Structs (now) | pydantic v2 models "
        "| before ÷ now (p50) |",
        "|---|---|---|---|---|---|",
    ]
    for name, case in results["cases"].items():
        before, now = case["before"], case["msgspec"]
        pyd = case.get("pydantic")
        pyd_text = f"{pyd['p50_us']:.0f} / {pyd['p95_us']:.0f}" if pyd else ""
        lines.append(
            f"| {name} | {case['bytes']:,} | {before['p50_us']:.0f} / {before['p95_us']:.0f} "
            f"| {now['p50_us']:.0f} / {now['p95_us']:.0f} | {pyd_text} | {before['p50_us'] / now['p50_us']:.1f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = bench_parser(__doc__, runs=2000, tiers=False)
    args = parser.parse_args()
    # read by settings() for the report's URLs; nothing connects to them
    os.environ.setdefault("DATABASE_URL", "postgresql://bench@127.0.0.1/unused")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1/0")
    publish("answers", run(args.runs), render, HEADING, args)


if __name__ == "__main__":
    main()
