"""SARIF 2.1.0 in: a pure mapping of a SARIF log onto a Scan Format v1 body, every error named by its JSON path in the
log (docs/sarif.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from app.kernel.errors import ValidationError
from app.kernel.intake import Budget
from app.reports.types import SarifSkipped, SarifSummary, SarifTruncated
from app.reports.validation import (
    MAX_DESCRIPTION,
    MAX_FINDINGS,
    MAX_LABEL,
    MAX_PATH_BYTES,
    MAX_TITLE,
    ReportInput,
    canonical_path,
    normalize_commit_sha,
    validate_report,
)

SARIF_MEDIA_TYPE = "application/sarif+json"
SARIF_VERSION = "2.1.0"
ELLIPSIS = "…"

# `level` → severity when no `security-severity` says otherwise; SARIF's default level is "warning" (§3.27.10)
LEVELS = {"error": "high", "warning": "medium", "note": "low", "none": "info"}
# `security-severity` (a CVSS-like score, as code-scanning services read it) → severity: lowest score of each band
SCORE_BANDS = ((9.0, "critical"), (7.0, "high"), (4.0, "medium"), (0.1, "low"))
# results that are not problems (§3.27.9): skipped like suppressed ones
NOT_PROBLEMS = frozenset({"pass", "notApplicable"})
MAX_BASE_CHAIN = 16  # originalUriBaseIds may chain; a cycle must not loop
MAX_BASES = 100  # originalUriBaseIds entries of one run
# GitHub code scanning's own upload limits: no real tool's log needs more, and each bounds a loop over the log
MAX_RUNS, MAX_RESULTS_PER_RUN, MAX_RULES_PER_RUN = 20, 25_000, 25_000
MAX_URI = 4 * MAX_PATH_BYTES  # a URI longer than this cannot name a path of MAX_PATH_BYTES, even percent-encoded
MAX_TEXT = MAX_DESCRIPTION + 1  # every text is read up to here: anything longer is cut to MAX_DESCRIPTION anyway
MAX_ARGUMENTS, MAX_ARGUMENT = 20, 200  # message arguments filled into a rule's message string


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


def _fail(path: str, message: str) -> ValidationError:
    return ValidationError({path: [message]})


def _as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str | None:
    """`{"text": ...}` (a message or a multiformat string) → its first MAX_TEXT characters, when it is a non-blank
    string (a rule's text is shared by many results: it is never read whole)."""
    text = _as_dict(value).get("text")
    if not isinstance(text, str):
        return None
    text = text[:MAX_TEXT]
    return text if text.strip() else None


def _capped(value: object) -> object:
    """A string cut to MAX_TEXT characters (rule names and ids are shared by many results); anything else as is."""
    return value[:MAX_TEXT] if isinstance(value, str) else value


def _scheme(uri: str) -> str | None:
    """The URI's scheme ("" when relative); None when it cannot be parsed (an unmatched `[` in a host)."""
    try:
        return urlsplit(uri).scheme
    except ValueError:
        return None


def _shorten(text: str, maximum: int) -> tuple[str, bool]:
    if len(text) <= maximum:
        return text, False
    return text[: maximum - 1].rstrip() + ELLIPSIS, True


class _Run:
    """One run's tool, rules and base URIs, looked up once."""

    def __init__(self, run: dict[str, Any], path: str, source_root: str | None = None) -> None:
        self.path = path
        self.source_root = source_root
        tool = _as_dict(run.get("tool"))
        self.driver = _as_dict(tool.get("driver"))
        self.extensions = [_as_dict(e) for e in _list(tool.get("extensions"))]
        self.artifacts = [_as_dict(a) for a in _list(run.get("artifacts"))]
        self.bases = self._bases(_as_dict(run.get("originalUriBaseIds")))
        self.prefixes = {base_id: self._base_prefix(base_id) for base_id in self.bases}
        self.absolute_bases = self._absolute_bases()
        self.rules_by_id: dict[str, dict[str, Any]] = {}
        for component in (*self.extensions, self.driver):  # the driver's own rules win on a shared id
            if len(_list(component.get("rules"))) > MAX_RULES_PER_RUN:
                raise _fail(f"{path}.tool", f"a tool component must hold at most {MAX_RULES_PER_RUN} rules")
            for rule in _list(component.get("rules")):
                if isinstance(rule, dict) and isinstance(rule.get("id"), str):
                    self.rules_by_id[rule["id"]] = rule

    def rule(self, result: dict[str, Any]) -> dict[str, Any]:
        """The rule (reportingDescriptor) of a result: by index in its tool component, else by id, else none."""
        reference = _as_dict(result.get("rule"))
        component = self.driver
        component_index = _as_dict(reference.get("toolComponent")).get("index")
        if isinstance(component_index, int) and 0 <= component_index < len(self.extensions):
            component = self.extensions[component_index]
        rules = _list(component.get("rules"))
        index = result.get("ruleIndex", reference.get("index"))
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(rules):
            return _as_dict(rules[index])
        rule_id = result.get("ruleId", reference.get("id"))
        return self.rules_by_id.get(rule_id, {}) if isinstance(rule_id, str) else {}

    def _bases(self, raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        where = f"{self.path}.originalUriBaseIds"
        if len(raw) > MAX_BASES:
            raise _fail(where, f"must have at most {MAX_BASES} entries")
        for base_id, base in raw.items():
            uri = _as_dict(base).get("uri")
            if isinstance(uri, str) and len(uri) > MAX_URI:
                raise _fail(f"{where}.{base_id}.uri", f"must be at most {MAX_URI} characters")
        return {k: _as_dict(v) for k, v in raw.items()}

    def _base_prefix(self, base_id: str) -> str:
        """The repository-relative prefix a `uriBaseId` stands for: relative base URIs chain up to one that is
        absolute or undefined (`%SRCROOT%`), which is taken as the repository root. Computed once per id; a chain
        longer than MAX_BASE_CHAIN (a cycle) or a prefix longer than a path may be is refused, naming the id."""
        prefix, current, seen = "", base_id, set[str]()
        while current in self.bases:
            if current in seen or len(seen) == MAX_BASE_CHAIN:
                raise _fail(
                    f"{self.path}.originalUriBaseIds.{base_id}",
                    f"must reach an absolute or undefined base within {MAX_BASE_CHAIN} steps (no cycle)",
                )
            seen.add(current)
            base = self.bases[current]
            uri = base.get("uri")
            if not isinstance(uri, str) or _scheme(uri) != "":
                break
            prefix = uri.rstrip("/") + "/" + prefix if uri.strip("/") else prefix
            if len(prefix) > MAX_URI:
                raise _fail(f"{self.path}.originalUriBaseIds.{base_id}", f"must stand for at most {MAX_URI} characters")
            next_id = base.get("uriBaseId")
            if not isinstance(next_id, str):
                break
            current = next_id
        return prefix

    def _absolute_bases(self) -> list[str]:
        found = []
        for base in self.bases.values():
            uri = base.get("uri")
            if isinstance(uri, str) and _scheme(uri):
                found.append(uri if uri.endswith("/") else uri + "/")
        return sorted(found, key=len, reverse=True)

    def _relative(self, uri: str, where: str) -> str:
        """An absolute URI made repository-relative: cut at the longest absolute base URI it starts with, else
        (a `file:` URI) at the checkout root the caller named (`?source_root=`, `--source-root`)."""
        base = next((b for b in self.absolute_bases if uri.startswith(b)), None)
        if base is not None:
            return uri[len(base) :]
        if self.source_root is None or not uri.startswith("file:"):
            raise _fail(
                where,
                "must be relative to the repository: no originalUriBaseIds entry is a prefix of it; name the "
                "checkout root it lies under (?source_root=/abs/path on the API, --source-root DIR on the CLI)",
            )
        file_path = unquote(urlsplit(uri).path)
        if not file_path.startswith(self.source_root):
            raise _fail(where, f"lies outside the checkout root {self.source_root.rstrip('/')} (source_root)")
        return file_path[len(self.source_root) :]

    def repository_path(self, location: dict[str, Any], path: str) -> str | None:
        """A physical location's file as a repository-relative path; None when it names no file."""
        artifact = _as_dict(location.get("artifactLocation"))
        uri, base_id = artifact.get("uri"), artifact.get("uriBaseId")
        index = artifact.get("index")
        if not isinstance(uri, str) and isinstance(index, int) and 0 <= index < len(self.artifacts):
            artifact = _as_dict(self.artifacts[index].get("location"))
            uri, base_id = artifact.get("uri"), artifact.get("uriBaseId")
        if not isinstance(uri, str) or not uri.strip():
            return None
        where = f"{path}.artifactLocation.uri"
        if len(uri) > MAX_URI:
            raise _fail(where, f"must be at most {MAX_URI} characters")
        scheme = _scheme(uri)
        if scheme is None:
            raise _fail(where, "must be a valid URI reference")
        if scheme:
            relative = self._relative(uri, where)
        else:
            relative = (self.prefixes.get(base_id, "") if isinstance(base_id, str) else "") + uri
        try:
            return canonical_path(unquote(relative.split("?")[0].split("#")[0]))
        except ValueError as exc:
            raise _fail(where, str(exc)) from None


def _lines(region: dict[str, Any], path: str) -> tuple[int | None, int | None]:
    start, end = region.get("startLine"), region.get("endLine")
    if start is None:
        return None, None  # a byte or character region: the file without lines
    for key, value in (("startLine", start), ("endLine", end)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise _fail(f"{path}.region.{key}", "must be an integer of at least 1")
    return start, end if end is not None else start


def _severity(result: dict[str, Any], rule: dict[str, Any], path: str) -> str:
    """`security-severity` (the result's, else its rule's) when it is a score; else the `level` (the result's, else
    the rule's default, else SARIF's default "warning")."""
    level = result.get("level", _as_dict(rule.get("defaultConfiguration")).get("level", "warning"))
    if not isinstance(level, str) or level not in LEVELS:
        raise _fail(f"{path}.level", "must be one of " + ", ".join(LEVELS))
    for properties in (_as_dict(result.get("properties")), _as_dict(rule.get("properties"))):
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
    message = _as_dict(result.get("message"))
    text = _text(message)
    if text is not None:
        return text
    message_id = message.get("id")
    template = _text(_as_dict(rule.get("messageStrings")).get(message_id)) if isinstance(message_id, str) else None
    if template is None:
        return None
    # bounded: a hostile template repeating `{0}` must not multiply a long argument without end
    template = template[: MAX_DESCRIPTION + 1]
    for n, argument in enumerate(_list(message.get("arguments"))[:MAX_ARGUMENTS]):
        template = template.replace("{" + str(n) + "}", str(argument)[:MAX_ARGUMENT])[: MAX_DESCRIPTION + 1]
    return template


def _title(result: dict[str, Any], rule: dict[str, Any], message: str | None) -> str:
    """The rule's short description, else its name (after its id when they differ: Bandit names several rules
    `blacklist`, and the title is the pattern), else the message, else the rule id."""
    title = _text(rule.get("shortDescription"))
    name, rule_id = _capped(rule.get("name")), _capped(rule.get("id", result.get("ruleId")))
    if title is None and isinstance(name, str) and name.strip():
        title = name if not isinstance(rule_id, str) or rule_id == name else f"{rule_id} {name}"
    if title is None:
        title = message if message is not None else (rule_id if isinstance(rule_id, str) else "SARIF result")
    return " ".join(title.split())  # one line


def _description(rule: dict[str, Any], message: str | None, title: str) -> str:
    parts = [message or title]
    help_text = _text(rule.get("help")) or _text(rule.get("fullDescription"))
    if help_text is not None and help_text != message:
        parts.append(help_text)
    help_uri = _capped(rule.get("helpUri"))
    if isinstance(help_uri, str) and help_uri.startswith(("https://", "http://")):
        parts.append(f"Rule documentation: {help_uri}")
    return "\n\n".join(parts)


def _skip_reason(result: dict[str, Any]) -> str | None:
    suppressions = _list(result.get("suppressions"))
    # suppressed unless a suppression is still under review or was rejected (§3.27.23, §3.35.3)
    if suppressions and all(_as_dict(s).get("status", "accepted") == "accepted" for s in suppressions):
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
        raise _fail(f"{path}.partialFingerprints", "must be an object of strings")
    return raw or None


def _label(driver_like: dict[str, Any]) -> str | None:
    for key in ("semanticVersion", "version"):
        value = driver_like.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _tool(runs: list[_Run]) -> tuple[str, str]:
    """model = the tool's name and version; prompt_version = its rule pack's version (the first tool extension
    with one, e.g. a CodeQL query pack), else the tool's semantic version."""
    name = runs[0].driver.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _fail(f"{runs[0].path}.tool.driver.name", "must be a non-blank string")
    for run in runs[1:]:
        if run.driver.get("name") != name:
            raise _fail(f"{run.path}.tool.driver.name", f"must be {name!r} like runs[0]: one report is one tool's log")
    driver = runs[0].driver
    version = driver.get("version") if isinstance(driver.get("version"), str) else _label(driver)
    model = " ".join(f"{name} {version or ''}".split())
    pack = next(((e, v) for e in runs[0].extensions if (v := _label(e)) is not None), None)
    if pack is not None and isinstance(pack[0].get("name"), str):
        prompt_version = f"{pack[0]['name']} {pack[1]}"
    else:
        prompt_version = _label(driver) or "unversioned"
    return _shorten(model, MAX_LABEL)[0], _shorten(" ".join(prompt_version.split()), MAX_LABEL)[0]


def _commit(runs: list[_Run], raw_runs: list[dict[str, Any]], commit_sha: str | None) -> str:
    """The commit: `versionControlProvenance[].revisionId` (one value across the log), else the `commit_sha`
    parameter; both present must agree."""
    found: tuple[str, str] | None = None
    for run, raw in zip(runs, raw_runs, strict=True):
        for j, provenance in enumerate(_list(raw.get("versionControlProvenance"))):
            revision = _as_dict(provenance).get("revisionId")
            if revision is None:
                continue
            where = f"{run.path}.versionControlProvenance[{j}].revisionId"
            sha, error = normalize_commit_sha(revision)
            if error is not None or sha is None:
                raise _fail(where, f"{error or 'is not a commit'} (a Git commit SHA)")
            if found is not None and sha != found[0]:
                raise _fail(where, f"must equal {found[1]}: one report is one commit")
            found = found or (sha, where)
    given: str | None = None
    if commit_sha is not None:
        given, error = normalize_commit_sha(commit_sha)
        if error is not None:
            raise _fail("commit_sha", error)
    if found is None:
        if given is None:
            raise _fail(
                "commit_sha",
                "is required: the log has no runs[].versionControlProvenance[].revisionId, "
                "so give the commit (the commit_sha parameter, or --commit)",
            )
        return given
    if given is not None and given != found[0]:
        raise _fail("commit_sha", f"does not match {found[1]} ({found[0]})")
    return found[0]


def _too_many(results: int) -> ValidationError:
    # refused at the first result past the limit: the rest is counted, not mapped
    return _fail(
        "runs",
        f"the log has {results} results, more than {MAX_FINDINGS} of them to store (after the skipped ones); "
        f"one report holds at most {MAX_FINDINGS} findings: split the log",
    )


def normalize_source_root(raw: str | None) -> str | None:
    """`?source_root=`: an absolute path, kept with one trailing slash."""
    if raw is None or raw == "":
        return None
    if not raw.startswith("/") or len(raw) > MAX_URI or "\x00" in raw:
        raise _fail("source_root", f"must be an absolute path of at most {MAX_URI} characters")
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
        raise _fail("version", f"must be {SARIF_VERSION!r} (SARIF 2.1.0)")
    raw_runs = log.get("runs")
    if not isinstance(raw_runs, list) or not raw_runs:
        raise _fail("runs", "must be a non-empty list")
    if len(raw_runs) > MAX_RUNS:
        raise _fail("runs", f"must hold at most {MAX_RUNS} runs (GitHub code scanning's limit too): split the log")
    for i, raw in enumerate(raw_runs):
        if not isinstance(raw, dict):
            raise _fail(f"runs[{i}]", "must be an object")
        results = raw.get("results", [])
        if not isinstance(results, list):
            raise _fail(f"runs[{i}].results", "must be a list")
        if len(results) > MAX_RESULTS_PER_RUN:
            raise _fail(f"runs[{i}].results", f"must hold at most {MAX_RESULTS_PER_RUN} results: split the log")
    root = normalize_source_root(source_root)
    runs = []
    for i, raw in enumerate(raw_runs):
        runs.append(_Run(raw, f"runs[{i}]", root))
        if budget is not None:
            budget.check()
    model, prompt_version = _tool(runs)
    sha = _commit(runs, raw_runs, commit_sha)
    report = SarifReport(body={})
    findings: list[dict[str, Any]] = []
    origins: list[str] = []  # the SARIF path of each finding, to name the validator's errors
    for run, raw in zip(runs, raw_runs, strict=True):
        for k, result in enumerate(raw.get("results", [])):
            where = f"{run.path}.results[{k}]"
            report.results += 1
            if budget is not None:
                budget.check()
            if not isinstance(result, dict):
                raise _fail(where, "must be an object")
            reason = _skip_reason(result)
            locations = _list(result.get("locations"))
            physical = _as_dict(_as_dict(locations[0]).get("physicalLocation")) if locations else {}
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
            line_start, line_end = _lines(_as_dict(physical.get("region")), location_path)
            message = _message(result, rule)
            title, cut_title = _shorten(_title(result, rule, message), MAX_TITLE)
            description, cut_description = _shorten(_description(rule, message, title), MAX_DESCRIPTION)
            report.truncated["titles"] += cut_title
            report.truncated["descriptions"] += cut_description
            finding: dict[str, Any] = {
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
    guid = _as_dict(raw_runs[0].get("automationDetails")).get("guid")
    report.body = {
        "commit_sha": sha,
        "provenance": "agent",
        "model": model,
        "prompt_version": prompt_version,
        "run_id": guid if isinstance(guid, str) else None,
        "document": {"tarakan_scan_format": 1, "source": "sarif", "findings": findings},
    }
    try:
        report.report = validate_report(report.body)
    except ValidationError as exc:
        raise ValidationError({_sarif_path(key, origins): messages for key, messages in exc.errors.items()}) from None
    return report


def _sarif_path(key: str, origins: list[str]) -> str:
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
}
_ENVELOPE_ORIGINS = {
    "model": "runs[0].tool.driver",
    "prompt_version": "runs[0].tool.driver",
    "run_id": "runs[0].automationDetails.guid",
}
