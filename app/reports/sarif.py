"""SARIF 2.1.0 in: a pure mapping of a SARIF log onto a Scan Format v1 body, every error named by its JSON path in the
log (docs/sarif.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NotRequired, TypedDict

from app.kernel.errors import ValidationError
from app.kernel.intake import Budget
from app.kernel.text import is_clean
from app.reports.sarif_runs import (
    MAX_URI,
    Run,
    as_dict,
    as_list,
    capped,
    fail,
    shorten,
    text_of,
)
from app.reports.types import SarifSkipped, SarifSummary, SarifTruncated
from app.reports.validation import (
    MAX_DESCRIPTION,
    MAX_FINDINGS,
    MAX_LABEL,
    MAX_TITLE,
    ReportInput,
    normalize_commit_sha,
    validate_report,
)

SARIF_MEDIA_TYPE = "application/sarif+json"
SARIF_VERSION = "2.1.0"

# `level` → severity when no `security-severity` says otherwise; SARIF's default level is "warning" (§3.27.10)
LEVELS = {"error": "high", "warning": "medium", "note": "low", "none": "info"}
# `security-severity` (a CVSS-like score, as code-scanning services read it) → severity: lowest score of each band
SCORE_BANDS = ((9.0, "critical"), (7.0, "high"), (4.0, "medium"), (0.1, "low"))
# results that are not problems (§3.27.9): skipped like suppressed ones
NOT_PROBLEMS = frozenset({"pass", "notApplicable"})
# GitHub code scanning's own upload limits: no real tool's log needs more, and each bounds a loop over the log
MAX_RUNS, MAX_RESULTS_PER_RUN = 20, 25_000  # and MAX_RULES_PER_RUN (app.reports.sarif_runs)
MAX_ARGUMENTS, MAX_ARGUMENT = 20, 200
MAX_RULE_ID = 200  # message arguments filled into a rule's message string


class _Finding(TypedDict):
    """A Scan Format v1 finding mapped from one result (the body's `document.findings[]`)."""

    file: str
    line_start: int | None
    line_end: int | None
    severity: str
    title: str
    description: str
    partial_fingerprints: NotRequired[dict[str, str]]


@dataclass
class SarifReport:
    """The Scan Format v1 request body a log maps to, and what the mapping left out or shortened."""

    body: dict[str, Any]
    report: ReportInput | None = None  # the body, validated
    results: int = 0
    skipped: dict[str, int] = field(
        default_factory=lambda: {"suppressed": 0, "absent": 0, "not_a_problem": 0, "no_location": 0}
    )
    truncated: dict[str, int] = field(default_factory=lambda: {"titles": 0, "descriptions": 0})

    def summary(self) -> SarifSummary:
        """The `sarif` member of the submit response."""
        return SarifSummary(
            results=self.results,
            findings=len(self.body["document"]["findings"]),
            skipped=SarifSkipped(**self.skipped),
            truncated=SarifTruncated(**self.truncated),
        )


def is_sarif(document: object) -> bool:
    """Recognised by content, not by name: `"version": "2.1.0"` with a `runs` list."""
    return (
        isinstance(document, dict)
        and document.get("version") == SARIF_VERSION
        and isinstance(document.get("runs"), list)
    )


def _lines(region: dict[str, Any], path: str) -> tuple[int | None, int | None]:
    start, end = region.get("startLine"), region.get("endLine")
    if start is None:
        return None, None  # a byte or character region: the file without lines
    for key, value in (("startLine", start), ("endLine", end)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise fail(f"{path}.region.{key}", "must be an integer of at least 1")
    return start, end if end is not None else start


def _severity(result: dict[str, Any], rule: dict[str, Any], path: str) -> str:
    """`security-severity` (the result's, else its rule's) when it is a score; else the `level` (the result's, else
    the rule's default, else SARIF's default "warning")."""
    level = result.get("level", as_dict(rule.get("defaultConfiguration")).get("level", "warning"))
    if not isinstance(level, str) or level not in LEVELS:
        raise fail(f"{path}.level", "must be one of " + ", ".join(LEVELS))
    for properties in (as_dict(result.get("properties")), as_dict(rule.get("properties"))):
        score = _score(properties.get("security-severity"))
        if score is not None:
            return next((name for floor, name in SCORE_BANDS if score >= floor), "info")
    return LEVELS[level]


def _score(raw: object) -> float | None:
    """A `security-severity` score (a number or a numeric string, 0..10); anything else is ignored, as
    code-scanning services do."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str) or (isinstance(raw, str) and len(raw) > 32):
        return None
    try:
        score = float(raw)
    except ValueError:
        return None
    return score if math.isfinite(score) and 0 <= score <= 10 else None


def _message(result: dict[str, Any], rule: dict[str, Any]) -> str | None:
    """The result's message: its text, else the rule's message string it names with `{n}` placeholders filled."""
    message = as_dict(result.get("message"))
    text = text_of(message)
    if text is not None:
        return text
    message_id = message.get("id")
    template = text_of(as_dict(rule.get("messageStrings")).get(message_id)) if isinstance(message_id, str) else None
    if template is None:
        return None
    # bounded: a hostile template repeating `{0}` must not multiply a long argument without end
    template = template[: MAX_DESCRIPTION + 1]
    for n, argument in enumerate(as_list(message.get("arguments"))[:MAX_ARGUMENTS]):
        template = template.replace("{" + str(n) + "}", str(argument)[:MAX_ARGUMENT])[: MAX_DESCRIPTION + 1]
    return template


def _title(result: dict[str, Any], rule: dict[str, Any], message: str | None) -> str:
    """The rule's short description, else its name (after its id when they differ: Bandit names several rules
    `blacklist`, and the title is the pattern), else the message, else the rule id."""
    title = text_of(rule.get("shortDescription"))
    name, rule_id = capped(rule.get("name")), capped(rule.get("id", result.get("ruleId")))
    if title is None and isinstance(name, str) and name.strip():
        title = name if not isinstance(rule_id, str) or rule_id == name else f"{rule_id} {name}"
    if title is None:
        title = message if message is not None else (rule_id if isinstance(rule_id, str) else "SARIF result")
    return " ".join(title.split())  # one line


def _description(rule: dict[str, Any], message: str | None, title: str) -> str:
    parts = [message or title]
    help_text = text_of(rule.get("help")) or text_of(rule.get("fullDescription"))
    if help_text is not None and help_text != message:
        parts.append(help_text)
    help_uri = capped(rule.get("helpUri"))
    if isinstance(help_uri, str) and help_uri.startswith(("https://", "http://")):
        parts.append(f"Rule documentation: {help_uri}")
    return "\n\n".join(parts)


def _skip_reason(result: dict[str, Any]) -> str | None:
    suppressions = as_list(result.get("suppressions"))
    # suppressed unless a suppression is still under review or was rejected (§3.27.23, §3.35.3)
    if suppressions and all(as_dict(s).get("status", "accepted") == "accepted" for s in suppressions):
        return "suppressed"
    if result.get("baselineState") == "absent":
        return "absent"
    if str(result.get("kind", "fail")) in NOT_PROBLEMS:
        return "not_a_problem"
    return None


def _partial_fingerprints(result: dict[str, Any], path: str) -> dict[str, str] | None:
    raw = result.get("partialFingerprints")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise fail(f"{path}.partialFingerprints", "must be an object of strings")
    return raw or None


def _label(driver_like: dict[str, Any]) -> str | None:
    for key in ("semanticVersion", "version"):
        value = driver_like.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _tool(runs: list[Run]) -> tuple[str, str]:
    """model = the tool's name and version; prompt_version = its rule pack's version (the first tool extension
    with one, e.g. a CodeQL query pack), else the tool's semantic version."""
    name = runs[0].driver.get("name")
    if not isinstance(name, str) or not name.strip():
        raise fail(f"{runs[0].path}.tool.driver.name", "must be a non-blank string")
    for run in runs[1:]:
        if run.driver.get("name") != name:
            raise fail(f"{run.path}.tool.driver.name", f"must be {name!r} like runs[0]: one report is one tool's log")
    driver = runs[0].driver
    version = driver.get("version") if isinstance(driver.get("version"), str) else _label(driver)
    model = " ".join(f"{name} {version or ''}".split())
    pack = next(((e, v) for e in runs[0].extensions if (v := _label(e)) is not None), None)
    if pack is not None and isinstance(pack[0].get("name"), str):
        prompt_version = f"{pack[0]['name']} {pack[1]}"
    else:
        prompt_version = _label(driver) or "unversioned"
    return shorten(model, MAX_LABEL)[0], shorten(" ".join(prompt_version.split()), MAX_LABEL)[0]


def _commit(runs: list[Run], raw_runs: list[dict[str, Any]], commit_sha: str | None) -> str:
    """The commit: `versionControlProvenance[].revisionId` (one value across the log), else the `commit_sha`
    parameter; both present must agree."""
    found: tuple[str, str] | None = None
    for run, raw in zip(runs, raw_runs, strict=True):
        for j, provenance in enumerate(as_list(raw.get("versionControlProvenance"))):
            revision = as_dict(provenance).get("revisionId")
            if revision is None:
                continue
            where = f"{run.path}.versionControlProvenance[{j}].revisionId"
            sha, error = normalize_commit_sha(revision)
            if error is not None or sha is None:
                raise fail(where, f"{error or 'is not a commit'} (a Git commit SHA)")
            if found is not None and sha != found[0]:
                raise fail(where, f"must equal {found[1]}: one report is one commit")
            found = found or (sha, where)
    given: str | None = None
    if commit_sha is not None:
        given, error = normalize_commit_sha(commit_sha)
        if error is not None:
            raise fail("commit_sha", error)
    if found is None:
        if given is None:
            raise fail(
                "commit_sha",
                "is required: the log has no runs[].versionControlProvenance[].revisionId, "
                "so give the commit (the commit_sha parameter, or --commit)",
            )
        return given
    if given is not None and given != found[0]:
        raise fail("commit_sha", f"does not match {found[1]} ({found[0]})")
    return found[0]


def _too_many(results: int) -> ValidationError:
    # refused at the first result past the limit: the rest is counted, not mapped
    return fail(
        "runs",
        f"the log has {results} results, more than {MAX_FINDINGS} of them to store (after the skipped ones); "
        f"one report holds at most {MAX_FINDINGS} findings: split the log",
    )


def normalize_source_root(raw: str | None) -> str | None:
    """`?source_root=`: an absolute path, kept with one trailing slash."""
    if raw is None or raw == "":
        return None
    if not raw.startswith("/") or len(raw) > MAX_URI or "\x00" in raw:
        raise fail("source_root", f"must be an absolute path of at most {MAX_URI} characters")
    return raw.rstrip("/") + "/"


def sarif_to_report(
    log: dict[str, Any],
    *,
    commit_sha: str | None = None,
    source_root: str | None = None,
    budget: Budget | None = None,
) -> SarifReport:
    """Map a SARIF 2.1.0 log onto one Scan Format v1 request body, validated. Raises ValidationError naming the
    JSON path of the first problem; a log with more findings to store than one report holds is refused with both
    counts. `source_root`: the checkout an absolute `file:` URI is made relative to; `budget`: checked per result."""
    if log.get("version") != SARIF_VERSION:
        raise fail("version", f"must be {SARIF_VERSION!r} (SARIF 2.1.0)")
    raw_runs = log.get("runs")
    if not isinstance(raw_runs, list) or not raw_runs:
        raise fail("runs", "must be a non-empty list")
    if len(raw_runs) > MAX_RUNS:
        raise fail("runs", f"must hold at most {MAX_RUNS} runs (GitHub code scanning's limit too): split the log")
    for i, raw in enumerate(raw_runs):
        if not isinstance(raw, dict):
            raise fail(f"runs[{i}]", "must be an object")
        results = raw.get("results", [])
        if not isinstance(results, list):
            raise fail(f"runs[{i}].results", "must be a list")
        if len(results) > MAX_RESULTS_PER_RUN:
            raise fail(f"runs[{i}].results", f"must hold at most {MAX_RESULTS_PER_RUN} results: split the log")
    root = normalize_source_root(source_root)
    runs = []
    for i, raw in enumerate(raw_runs):
        runs.append(Run(raw, f"runs[{i}]", root))
        if budget is not None:
            budget.check()
    model, prompt_version = _tool(runs)
    sha = _commit(runs, raw_runs, commit_sha)
    report = SarifReport(body={})
    findings: list[_Finding] = []
    origins: list[str] = []  # the SARIF path of each finding, to name the validator's errors
    rule_ids: list[str | None] = []
    for run, raw in zip(runs, raw_runs, strict=True):
        for k, result in enumerate(raw.get("results", [])):
            where = f"{run.path}.results[{k}]"
            report.results += 1
            if budget is not None:
                budget.check()
            if not isinstance(result, dict):
                raise fail(where, "must be an object")
            reason = _skip_reason(result)
            locations = as_list(result.get("locations"))
            physical = as_dict(as_dict(locations[0]).get("physicalLocation")) if locations else {}
            location_path = f"{where}.locations[0].physicalLocation"
            file_path = run.repository_path(physical, location_path) if reason is None and physical else None
            if reason is None and file_path is None:
                reason = "no_location"
            if reason is not None:
                report.skipped[reason] += 1
                continue
            assert file_path is not None
            if len(findings) == MAX_FINDINGS:
                raise _too_many(sum(len(raw.get("results", [])) for raw in raw_runs))
            rule = run.rule(result)
            line_start, line_end = _lines(as_dict(physical.get("region")), location_path)
            message = _message(result, rule)
            title, cut_title = shorten(_title(result, rule, message), MAX_TITLE)
            description, cut_description = shorten(_description(rule, message, title), MAX_DESCRIPTION)
            report.truncated["titles"] += cut_title
            report.truncated["descriptions"] += cut_description
            finding: _Finding = {
                "file": file_path,
                "line_start": line_start,
                "line_end": line_end,
                "severity": _severity(result, rule, where),
                "title": title,
                "description": description,
            }
            fingerprints = _partial_fingerprints(result, where)
            if fingerprints is not None:
                finding["partial_fingerprints"] = fingerprints
            findings.append(finding)
            origins.append(where)
            rule_ids.append(_rule_id(result, rule))
    guid = as_dict(raw_runs[0].get("automationDetails")).get("guid")
    report.body = {
        "commit_sha": sha,
        "provenance": "agent",
        "model": model,
        "prompt_version": prompt_version,
        "run_id": guid if isinstance(guid, str) else None,
        "document": {"tarakan_scan_format": 1, "source": "sarif", "findings": findings},
    }
    try:
        validated = validate_report(report.body)
    except ValidationError as exc:
        raise ValidationError(sarif_errors(exc.errors, origins)) from None
    findings_in = [replace(f, rule_id=r) for f, r in zip(validated.findings, rule_ids, strict=True)]
    report.report = replace(validated, findings=findings_in, sarif_origins=tuple(origins))
    return report


def _rule_id(result: dict[str, Any], rule: dict[str, Any]) -> str | None:
    """The result's ruleId (else its rule's id), kept as `scan_findings.rule_id`."""
    rule_id = capped(result.get("ruleId", rule.get("id")))
    if not isinstance(rule_id, str) or not rule_id.strip() or not is_clean(rule_id):
        return None
    return rule_id[:MAX_RULE_ID]


def sarif_errors(errors: dict[str, list[str]], origins: Sequence[str]) -> dict[str, list[str]]:
    """Errors named by Scan Format v1 fields (`findings[2].line_end`) named by their place in the log."""
    return {_sarif_path(key, origins): messages for key, messages in errors.items()}


def _sarif_path(key: str, origins: Sequence[str]) -> str:
    """A Scan Format v1 field name (`findings[3].title`, `model`, `document.findings[3].x`) → where it came from
    in the log."""
    key = key.removeprefix("document.")
    if key.startswith("findings["):
        index, _, rest = key[len("findings[") :].partition("]")
        if index.isdigit() and int(index) < len(origins):
            detail = _FINDING_ORIGINS.get(rest, "")
            return origins[int(index)] + detail
    return _ENVELOPE_ORIGINS.get(key, key)


_FINDING_ORIGINS = {
    ".file": ".locations[0].physicalLocation.artifactLocation.uri",
    ".title": ".message",
    ".description": ".message",
    ".partial_fingerprints": ".partialFingerprints",
    ".line_end": ".locations[0].physicalLocation.region.endLine",
}
_ENVELOPE_ORIGINS = {
    "model": "runs[0].tool.driver",
    "prompt_version": "runs[0].tool.driver",
    "run_id": "runs[0].automationDetails.guid",
}
