"""SARIF in as a submitter meets it, one rule of docs/sarif.md at a time: which rule a result names, its title,
description and severity (each band's edge), the file a location stands for (base chains, absolute URIs, the
checkout root), what is skipped and counted, the tool and commit of the report, and every limit at its edge with
the JSON path its error names (bench/mutation.py holds app/reports/sarif.py to these). No database:
sarif_to_report is pure."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from app.kernel.errors import DomainError, ValidationError
from app.kernel.intake import Budget
from app.kernel.text import UNCLEAN_MESSAGE
from app.reports.sarif import (
    MAX_RESULTS_PER_RUN,
    MAX_RUNS,
    SarifReport,
    is_sarif,
    normalize_source_root,
    sarif_to_report,
)
from app.reports.sarif_runs import MAX_BASES, MAX_RULES_PER_RUN, MAX_URI

COMMIT = "c" * 40
LOCATION = "runs[0].results[0].locations[0].physicalLocation"
URI = LOCATION + ".artifactLocation.uri"


def result(uri: str | None = "app.py", **fields: Any) -> dict[str, Any]:
    """A result with a message and one location at line 3 (`uri=None`: no location)."""
    found: dict[str, Any] = {"ruleId": "R1", "message": {"text": "the message"}}
    if uri is not None:
        found["locations"] = [{"physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": 3}}}]
    return found | fields


def log(*results: dict[str, Any], rules: list[dict[str, Any]] | None = None, **run: Any) -> dict[str, Any]:
    driver = {"name": "probe", "version": "1.2", "rules": rules if rules is not None else [{"id": "R1"}]}
    return {"version": "2.1.0", "runs": [{"tool": {"driver": driver}, "results": list(results), **run}]}


def mapped(sarif: dict[str, Any], **options: Any) -> SarifReport:
    options.setdefault("commit_sha", COMMIT)
    return sarif_to_report(sarif, **options)


def findings(sarif: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = mapped(sarif, **options).body["document"]["findings"]
    return found


def one(sarif: dict[str, Any], **options: Any) -> dict[str, Any]:
    (finding,) = findings(sarif, **options)
    return finding


def refused(sarif: dict[str, Any], **options: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as info:
        mapped(sarif, **options)
    return info.value.errors


def the_error(sarif: dict[str, Any], **options: Any) -> tuple[str, str]:
    """The one field refused and its one message."""
    ((where, (message,)),) = refused(sarif, **options).items()
    return where, message


def file_of(location: dict[str, Any], **run: Any) -> str:
    found = result()
    found["locations"] = [{"physicalLocation": location}]
    return str(one(log(found, **run))["file"])


def test_recognised_by_version_and_runs_only() -> None:
    assert is_sarif({"version": "2.1.0", "runs": []})
    assert not is_sarif([{"version": "2.1.0", "runs": []}])
    assert not is_sarif({"version": "2.1.1", "runs": []})
    assert not is_sarif({"version": "2.1.0", "runs": {}})
    assert not is_sarif({"runs": []})


def test_the_report_and_its_summary() -> None:
    report = mapped(
        log(
            result("a.py"),
            result("b.py", suppressions=[{"kind": "inSource"}]),
            result("c.py", baselineState="absent"),
            result("d.py", kind="pass"),
            result("e.py", kind="notApplicable"),
            result(None),
            result("f.py", baselineState="unchanged", kind="fail", suppressions=[]),
            automationDetails={"guid": "run-7"},
        )
    )
    body = report.body
    assert {k: v for k, v in body.items() if k != "document"} == {
        "commit_sha": COMMIT,
        "provenance": "agent",
        "model": "probe 1.2",
        "prompt_version": "1.2",
        "run_id": "run-7",
    }
    assert body["document"]["tarakan_scan_format"] == 1 and body["document"]["source"] == "sarif"
    assert [f["file"] for f in body["document"]["findings"]] == ["a.py", "f.py"]
    summary = report.summary()
    assert (summary.results, summary.findings) == (7, 2)
    assert msgspec.to_builtins(summary.skipped) == {"suppressed": 1, "absent": 1, "not_a_problem": 2, "no_location": 1}
    assert msgspec.to_builtins(summary.truncated) == {"titles": 0, "descriptions": 0}
    assert report.report is not None and [f.file_path for f in report.report.findings] == ["a.py", "f.py"]
    assert mapped(log(result(), automationDetails={"guid": 7})).body["run_id"] is None


def test_a_suppression_under_review_or_rejected_keeps_the_result() -> None:
    accepted = {"kind": "external", "status": "accepted"}
    for suppressions, kept in [
        ([accepted], False),
        ([{"kind": "external"}], False),  # status defaults to accepted
        ([accepted, {"status": "underReview"}], True),
        ([{"status": "rejected"}], True),
        (["not an object"], False),  # no status: accepted
    ]:
        report = mapped(log(result(suppressions=suppressions)))
        assert (len(report.body["document"]["findings"]), report.skipped["suppressed"]) == (int(kept), 1 - kept)


def test_a_skipped_result_is_not_read_further() -> None:
    outside = result("../../etc/passwd")
    report = mapped(log(outside | {"suppressions": [{}]}, outside | {"kind": "pass"}, result("a.py")))
    assert (
        report.skipped["suppressed"],
        report.skipped["not_a_problem"],
        len(report.body["document"]["findings"]),
    ) == (
        1,
        1,
        1,
    )


def test_a_run_without_results_is_a_clean_scan() -> None:
    sarif = log(result())
    del sarif["runs"][0]["results"]
    report = mapped(sarif)
    assert (report.results, report.body["document"]["findings"]) == (0, [])
    sarif["runs"].append(log(result())["runs"][0])
    assert [f["file"] for f in findings(sarif)] == ["app.py"]


def test_a_location_without_a_file_is_skipped_as_no_location() -> None:
    blank = result("  ")
    logical = result(None, locations=[{"logicalLocations": [{"name": "f"}]}])
    not_a_list = result(None, locations={"physicalLocation": {}})
    report = mapped(log(blank, logical, not_a_list, result(None, locations=[])))
    assert (report.results, report.skipped["no_location"], report.body["document"]["findings"]) == (4, 4, [])


def test_lines_from_the_region() -> None:
    def lines(region: dict[str, Any]) -> tuple[Any, Any]:
        found = one(
            log(result(locations=[{"physicalLocation": {"artifactLocation": {"uri": "a.py"}, "region": region}}]))
        )
        return found["line_start"], found["line_end"]

    assert lines({"startLine": 1}) == (1, 1)
    assert lines({"startLine": 4, "endLine": 9}) == (4, 9)
    assert lines({"charOffset": 10, "charLength": 3}) == (None, None)
    for region, key in [
        ({"startLine": 0}, "startLine"),
        ({"startLine": True}, "startLine"),
        ({"startLine": "3"}, "startLine"),
        ({"startLine": 3, "endLine": 0}, "endLine"),
        ({"startLine": 3, "endLine": False}, "endLine"),
    ]:
        sarif = log(result(locations=[{"physicalLocation": {"artifactLocation": {"uri": "a.py"}, "region": region}}]))
        assert the_error(sarif) == (f"{LOCATION}.region.{key}", "must be an integer of at least 1")


# one test each, not parametrized: every test of the suite pays the per-test TRUNCATE of tests/conftest.py
BANDS = [
    (10, "critical"), (9.0, "critical"), ("8.99", "high"), (7.0, "high"), (6.9, "medium"), (4.0, "medium"),
    (3.9, "low"), (0.1, "low"), (0.09, "info"), (0, "info"),
]  # fmt: skip


def test_security_severity_bands_at_their_edges() -> None:
    for score, severity in BANDS:
        found = one(log(result(level="note", properties={"security-severity": score})))
        assert found["severity"] == severity, score


def test_an_unusable_score_leaves_the_level() -> None:
    for score in [True, "high", "1" * 33, "9." + "0" * 31, float("inf"), float("nan"), "nan", 10.01, -0.5, None, [9]]:
        found = one(log(result(level="error", properties={"security-severity": score})))
        assert found["severity"] == "high", score


def test_a_score_of_32_characters_is_read() -> None:
    score = "9." + "0" * 30
    assert one(log(result(level="note", properties={"security-severity": score})))["severity"] == "critical"


def test_the_results_score_then_the_rules_score_then_the_level() -> None:
    rules = [{"id": "R1", "properties": {"security-severity": "9.5"}, "defaultConfiguration": {"level": "note"}}]
    assert one(log(result(), rules=rules))["severity"] == "critical"
    assert one(log(result(properties={"security-severity": "5"}), rules=rules))["severity"] == "medium"
    assert one(log(result(properties={"security-severity": "x"}), rules=rules))["severity"] == "critical"
    plain = [{"id": "R1", "defaultConfiguration": {"level": "note"}}]
    assert one(log(result(), rules=plain))["severity"] == "low"  # the rule's default level
    assert one(log(result(level="error"), rules=plain))["severity"] == "high"  # the result's own level wins
    assert one(log(result()))["severity"] == "medium"  # SARIF's default level: warning
    assert one(log(result(level="none")))["severity"] == "info"
    for level in ("fatal", 3, None):
        where, message = the_error(log(result(level=level)))
        assert (where, message) == ("runs[0].results[0].level", "must be one of error, warning, note, none")


def test_the_rule_by_index_in_its_component_else_by_id() -> None:
    def titled(result_fields: dict[str, Any]) -> str:
        driver_rules = [{"id": "D0", "shortDescription": {"text": "driver 0"}}, {"id": "R1"}]
        driver = {"name": "probe", "rules": driver_rules}
        extensions = [
            {"name": "pack", "rules": [{"id": "E0", "shortDescription": {"text": "pack 0"}}]},
            {"name": "pack2", "rules": [{"id": "F0", "shortDescription": {"text": "pack2 0"}}, "not a rule", {}]},
        ]
        found = result(**result_fields)
        found.pop("ruleId") if "ruleId" not in result_fields else None
        sarif = {
            "version": "2.1.0",
            "runs": [{"tool": {"driver": driver, "extensions": extensions}, "results": [found]}],
        }
        return str(one(sarif)["title"])

    assert titled({"ruleIndex": 0}) == "driver 0"
    assert titled({"rule": {"index": 0}}) == "driver 0"
    assert titled({"rule": {"index": 0, "toolComponent": {"index": 1}}}) == "pack2 0"
    assert titled({"rule": {"index": 0, "toolComponent": {"index": 0}}}) == "pack 0"
    assert titled({"rule": {"index": 0, "toolComponent": {"index": 2}}}) == "driver 0"  # no such extension
    assert titled({"rule": {"index": 0, "toolComponent": {"index": -1}}}) == "driver 0"
    assert titled({"ruleIndex": 0, "rule": {"index": 1}}) == "driver 0"  # ruleIndex first
    assert titled({"ruleIndex": True, "ruleId": "E0"}) == "pack 0"  # a bool is no index: the id
    assert titled({"ruleIndex": -1, "ruleId": "E0"}) == "pack 0"
    assert titled({"ruleIndex": 2, "ruleId": "F0"}) == "pack2 0"  # past the driver's rules: the id
    assert titled({"ruleIndex": 1, "message": {}}) == "R1"  # a rule without texts: its id
    assert titled({"ruleIndex": 5, "message": {}}) == "SARIF result"
    assert titled({"rule": {"id": "E0"}}) == "pack 0"
    assert titled({"ruleId": "E0", "rule": {"id": "D0"}}) == "pack 0"  # ruleId first
    assert titled({"rule": {"index": 1, "toolComponent": {"index": 1}}}) == "the message"  # a string: no rule
    assert titled({"ruleId": 7}) == "the message"
    assert titled({"ruleId": ["R1"]}) == "the message"
    # a rule found by index without an id of its own: the result's ruleId names it
    assert titled({"rule": {"index": 2, "toolComponent": {"index": 1}}, "ruleId": "F9", "message": {}}) == "F9"
    assert titled({"ruleId": "nowhere"}) == "the message"


def test_the_drivers_own_rule_wins_a_shared_id() -> None:
    driver = {"name": "probe", "rules": [{"id": "R1", "shortDescription": {"text": "the driver's"}}]}
    extension = {"name": "pack", "rules": [{"id": "R1", "shortDescription": {"text": "the pack's"}}]}
    sarif = {
        "version": "2.1.0",
        "runs": [{"tool": {"driver": driver, "extensions": [extension]}, "results": [result()]}],
    }
    assert one(sarif)["title"] == "the driver's"


def test_titles() -> None:
    def title(rule: dict[str, Any], **fields: Any) -> str:
        return str(one(log(result(**fields), rules=[{"id": "R1"} | rule]))["title"])

    assert title({"shortDescription": {"text": "Short"}, "name": "named"}) == "Short"
    assert title({"shortDescription": {"text": "  "}, "name": "named"}) == "R1 named"
    assert title({"shortDescription": {"text": 5}, "name": "named"}) == "R1 named"
    assert title({"name": "R1"}) == "R1"  # the name is the id: said once
    assert title({"name": "  "}) == "the message"
    assert title({"name": 4}) == "the message"
    assert title({}, message={"text": "  spread \n over\tlines  "}) == "spread over lines"
    assert title({}, message={}) == "R1"
    assert one(log(result(message={}, ruleId=None), rules=[]))["title"] == "SARIF result"
    assert title({"name": "n" * 20_000})[:3] == "R1 "  # a name is read only so far: cut like a title
    assert title({"name": " " * 10_001 + "named"}) == "the message"  # read only so far: blank


def test_a_title_over_200_characters_is_cut_with_an_ellipsis() -> None:
    def title(text: str) -> tuple[str, int]:
        report = mapped(log(result(), rules=[{"id": "R1", "shortDescription": {"text": text}}]))
        return report.body["document"]["findings"][0]["title"], report.truncated["titles"]

    assert title("a" * 200) == ("a" * 200, 0)
    assert title("a" * 201) == ("a" * 199 + "…", 1)
    assert title("a" * 198 + " " + "c" * 10) == ("a" * 198 + "…", 1)  # no space before the ellipsis


def test_descriptions() -> None:
    def description(rule: dict[str, Any], **fields: Any) -> str:
        return str(one(log(result(**fields), rules=[{"id": "R1"} | rule]))["description"])

    assert description({}) == "the message"
    assert description({"shortDescription": {"text": "T"}}, message={}) == "T"  # no message: the title
    assert description({"help": {"text": "Help"}, "fullDescription": {"text": "Full"}}) == "the message\n\nHelp"
    assert description({"help": {"text": " "}, "fullDescription": {"text": "Full"}}) == "the message\n\nFull"
    assert description({"fullDescription": {"text": "the message"}}) == "the message"  # not said twice
    assert description({"helpUri": "https://x.example/r1"}) == "the message\n\nRule documentation: https://x.example/r1"
    assert description({"helpUri": "http://x.example/r1"}) == "the message\n\nRule documentation: http://x.example/r1"
    assert description({"helpUri": "javascript:alert(1)"}) == "the message"
    assert description({"helpUri": ["https://x.example"]}) == "the message"
    long = description({"help": {"text": "h" * 20_000}})
    assert len(long) == 10_000 and long.endswith("h…")


def test_every_cut_is_counted() -> None:
    long = {"text": "m" * 10_001}
    report = mapped(log(result(), result("b.py", message=long), result("c.py", message=long), result("d.py")))
    assert report.truncated == {"titles": 2, "descriptions": 2}
    assert report.truncated["descriptions"] == report.summary().truncated.descriptions


def test_a_message_from_the_rules_message_strings() -> None:
    rule = {"id": "R1", "messageStrings": {"default": {"text": "{0} flows to {1}; {0} again, {2} unfilled"}}}

    def message(fields: dict[str, Any]) -> str:
        return str(one(log(result(message=fields), rules=[rule]))["description"])

    assert message({"id": "default", "arguments": ["input", 7]}) == "input flows to 7; input again, {2} unfilled"
    assert message({"id": "default"}) == "{0} flows to {1}; {0} again, {2} unfilled"
    assert message({"id": "default", "arguments": ["x" * 300]}).startswith("x" * 200 + " flows")
    assert message({"text": "own", "id": "default"}) == "own"
    assert message({"id": "other"}) == "R1"  # no message: the title, the rule id
    assert message({"id": 0}) == "R1"
    assert message({"id": ["default"]}) == "R1"
    many = {"id": "R1", "messageStrings": {"m": {"text": " ".join(f"{{{n}}}" for n in range(22))}}}
    text = one(log(result(message={"id": "m", "arguments": [f"a{n}" for n in range(22)]}), rules=[many]))["title"]
    assert text == " ".join(f"a{n}" for n in range(20)) + " {20} {21}"  # 20 arguments at most


def test_a_template_as_long_as_a_text_is_read_is_cut_like_a_description() -> None:
    rule = {"id": "R1", "shortDescription": {"text": "T"}, "messageStrings": {"m": {"text": "x" * 10_001}}}
    report = mapped(log(result(message={"id": "m"}), rules=[rule]))
    assert report.body["document"]["findings"][0]["description"] == "x" * 9_999 + "…"
    assert report.truncated == {"titles": 0, "descriptions": 1}


def test_a_template_repeating_an_argument_is_bounded() -> None:
    rule = {"id": "R1", "messageStrings": {"m": {"text": "{0}" * 5_000}}}
    found = one(log(result(message={"id": "m", "arguments": ["y" * 200]}), rules=[rule]))
    assert len(found["description"]) == 10_000 and found["description"].endswith("y…")


def test_partial_fingerprints_kept_as_written() -> None:
    assert one(log(result(partialFingerprints={"h/v1": "abc"})))["partial_fingerprints"] == {"h/v1": "abc"}
    assert "partial_fingerprints" not in one(log(result(partialFingerprints={})))
    assert "partial_fingerprints" not in one(log(result()))
    for bad in ({"h": 1}, ["abc"], "abc"):
        where, message = the_error(log(result(partialFingerprints=bad)))
        assert (where, message) == ("runs[0].results[0].partialFingerprints", "must be an object of strings")
    too_many = {f"k{n}": "v" for n in range(21)}
    where, message = the_error(log(result(), result(partialFingerprints=too_many)))
    assert where == "runs[0].results[1].partialFingerprints" and "at most 20 strings" in message


def test_errors_of_the_mapped_finding_name_the_result_it_came_from() -> None:
    skipped = result("s.py", kind="pass")
    where, message = the_error(log(skipped, result(message={"text": "bad \x00 byte"})))
    assert (where, message) == ("runs[0].results[1].message", UNCLEAN_MESSAGE)
    rules = [{"id": "R1", "shortDescription": {"text": "bad \x00 title"}}]
    assert the_error(log(skipped, skipped, result(), rules=rules))[0] == "runs[0].results[2].message"
    # a string of the finding that no rule of its own reads: the result
    assert the_error(log(skipped, result(partialFingerprints={"k": "v\x00"})))[0] == "runs[0].results[1]"
    assert the_error(log(skipped, result(partialFingerprints={"k]": "v\x00"})))[0] == "runs[0].results[1]"


def test_a_mapped_document_over_the_stored_documents_limit_is_refused_as_the_document() -> None:
    long = [result(f"f{n}.py", message={"text": "m" * 10_000}) for n in range(200)]  # 2,000,000 of messages
    assert the_error(log(*long)) == ("document", "must be at most 2000000 characters")


def test_errors_of_the_mapped_envelope_name_the_tool_or_the_guid() -> None:
    sarif = log(result())
    sarif["runs"][0]["tool"]["driver"]["name"] = "pro\x00be"
    assert the_error(sarif)[0] == "runs[0].tool.driver"
    sarif = log(result())
    sarif["runs"][0]["tool"]["extensions"] = [{"name": "pa\x00ck", "version": "1"}]
    assert the_error(sarif)[0] == "runs[0].tool.driver"
    assert the_error(log(result(), automationDetails={"guid": "g" * 201})) == (
        "runs[0].automationDetails.guid",
        "must be at most 200 characters",
    )


def test_the_tool_names_the_model_and_the_rule_pack() -> None:
    def tool(driver: dict[str, Any], extensions: list[Any] | None = None) -> tuple[str, str]:
        run = {"tool": {"driver": {"name": "Tool"} | driver, "extensions": extensions or []}, "results": []}
        body = mapped({"version": "2.1.0", "runs": [run]}).body
        return body["model"], body["prompt_version"]

    assert tool({"version": "2.0", "semanticVersion": "2.0.1"}) == ("Tool 2.0", "2.0.1")
    assert tool({"semanticVersion": " 2.0.1 "}) == ("Tool 2.0.1", "2.0.1")
    assert tool({"version": 2}) == ("Tool", "unversioned")
    assert tool({"version": " "}) == ("Tool", "unversioned")
    assert tool({"version": "3"}) == ("Tool 3", "3")
    assert tool({}, [{"name": "no-version"}, {"name": "pack", "semanticVersion": "0.9"}]) == ("Tool", "pack 0.9")
    assert tool({"version": "3"}, [{"version": "0.9"}]) == ("Tool 3", "3")  # a pack without a name
    assert tool({}, [{"name": "pack", "version": "1\n  2"}]) == ("Tool", "pack 1 2")
    long = tool({"version": "v" * 200}, [{"name": "p" * 200, "version": "1"}])
    assert long == ("Tool " + "v" * 94 + "…", "p" * 99 + "…")
    for name in (None, "  ", 7):
        run = {"tool": {"driver": {"name": name}}, "results": []}
        where, message = the_error({"version": "2.1.0", "runs": [run]})
        assert (where, message) == ("runs[0].tool.driver.name", "must be a non-blank string")


def test_every_run_is_the_same_tool() -> None:
    sarif = log(result())
    sarif["runs"] += [copy.deepcopy(sarif["runs"][0]), copy.deepcopy(sarif["runs"][0])]
    sarif["runs"][1]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = "second.py"
    assert [f["file"] for f in findings(sarif)] == ["app.py", "second.py", "app.py"]
    second = copy.deepcopy(sarif)
    second["runs"][1]["tool"]["driver"]["name"] = "other"
    assert the_error(second)[0] == "runs[1].tool.driver.name"
    sarif["runs"][2]["tool"]["driver"]["name"] = "other"
    assert the_error(sarif) == (
        "runs[2].tool.driver.name",
        "must be 'probe' like runs[0]: one report is one tool's log",
    )


def test_the_commit_from_the_log_or_the_parameter() -> None:
    def provenance(*revisions: Any) -> list[dict[str, Any]]:
        return [
            {"repositoryUri": "https://example.com/r"} | ({} if r is None else {"revisionId": r}) for r in revisions
        ]

    upper = "ABCDEF" + "0" * 34
    assert (
        mapped(log(result(), versionControlProvenance=provenance(None, upper)), commit_sha=None).body["commit_sha"]
        == upper.lower()
    )
    assert (
        mapped(log(result(), versionControlProvenance=provenance(upper)), commit_sha=upper.lower()).body["commit_sha"]
        == upper.lower()
    )
    assert mapped(log(result()), commit_sha=" " + upper + " ").body["commit_sha"] == upper.lower()
    second = log(result(), versionControlProvenance=provenance(upper))
    second["runs"].append(copy.deepcopy(second["runs"][0]) | {"versionControlProvenance": provenance(upper, "1" * 40)})
    assert the_error(second, commit_sha=None) == (
        "runs[1].versionControlProvenance[1].revisionId",
        "must equal runs[0].versionControlProvenance[0].revisionId: one report is one commit",
    )
    assert the_error(log(result(), versionControlProvenance=provenance("main")), commit_sha=None) == (
        "runs[0].versionControlProvenance[0].revisionId",
        "must be 40 hexadecimal characters (a Git commit SHA)",
    )
    assert the_error(log(result(), versionControlProvenance=provenance(" ")), commit_sha=None)[1] == (
        "can't be blank (a Git commit SHA)"
    )
    assert the_error(log(result()), commit_sha=None) == (
        "commit_sha",
        "is required: the log has no runs[].versionControlProvenance[].revisionId, so give the commit (the "
        "commit_sha parameter, or --commit)",
    )
    assert the_error(log(result()), commit_sha="xyz") == ("commit_sha", "must be 40 hexadecimal characters")
    assert the_error(log(result()), commit_sha="") == ("commit_sha", "can't be blank")
    assert the_error(log(result(), versionControlProvenance=provenance(upper)), commit_sha="d" * 40) == (
        "commit_sha",
        f"does not match runs[0].versionControlProvenance[0].revisionId ({upper.lower()})",
    )
    assert the_error(log(result(), versionControlProvenance=provenance(upper)), commit_sha="zz")[0] == "commit_sha"


def test_the_log_and_its_runs_are_checked_first() -> None:
    assert the_error({"version": "2.1", "runs": [{}]}) == ("version", "must be '2.1.0' (SARIF 2.1.0)")
    not_runs: list[Any] = [[], {}, None]
    for runs in not_runs:
        assert the_error({"version": "2.1.0", "runs": runs}) == ("runs", "must be a non-empty list")
    assert the_error({"version": "2.1.0", "runs": [log()["runs"][0], "run"]}) == ("runs[1]", "must be an object")
    assert the_error({"version": "2.1.0", "runs": [log()["runs"][0], {"results": {}}]}) == (
        "runs[1].results",
        "must be a list",
    )
    not_a_result: Any = "a result"
    assert the_error(log(result(), not_a_result)) == ("runs[0].results[1]", "must be an object")
    runs = log(result())["runs"] * MAX_RUNS
    assert len(findings({"version": "2.1.0", "runs": runs})) == MAX_RUNS
    assert the_error({"version": "2.1.0", "runs": [*runs, runs[0]]}) == (
        "runs",
        "must hold at most 20 runs (GitHub code scanning's limit too): split the log",
    )


def test_results_and_rules_of_a_run_at_their_limits() -> None:
    skipped = result(None)
    report = mapped(log(*[skipped] * MAX_RESULTS_PER_RUN))
    assert (report.results, report.skipped["no_location"]) == (MAX_RESULTS_PER_RUN, MAX_RESULTS_PER_RUN)
    assert the_error(log(*[skipped] * (MAX_RESULTS_PER_RUN + 1))) == (
        "runs[0].results",
        "must hold at most 25000 results: split the log",
    )
    rules = [{"id": "R1"}] * MAX_RULES_PER_RUN
    assert len(findings(log(result(), rules=rules))) == 1
    assert the_error(log(result(), rules=[*rules, {"id": "R2"}])) == (
        "runs[0].tool",
        "a tool component must hold at most 25000 rules",
    )
    sarif = log(result())
    sarif["runs"][0]["tool"]["extensions"] = [{"name": "pack", "rules": [*rules, {}]}]
    assert the_error(sarif)[0] == "runs[0].tool"


def test_at_most_200_findings_counting_every_result_of_the_log() -> None:
    files = [result(f"f{n}.py") for n in range(200)]
    assert len(findings(log(*files, result(None)))) == 200
    sarif = log(*files[:150])
    sarif["runs"].append(copy.deepcopy(sarif["runs"][0]) | {"results": [*files[:51], result(None), result(None)]})
    assert the_error(sarif) == (
        "runs",
        "the log has 203 results, more than 200 of them to store (after the skipped ones); one report holds at most "
        "200 findings: split the log",
    )


def test_the_budget_is_checked_for_every_result() -> None:
    class Checks(Budget):
        """A budget that runs out at its `allowed + 1`-th check."""

        def __init__(self, allowed: int) -> None:
            super().__init__(60)
            self.allowed = allowed

        def check(self) -> None:
            self.allowed -= 1
            if self.allowed < 0:
                raise DomainError({"body": ["over"]}, status_code=413)

    sarif = log(result("a.py"), result("b.py"), result("c.py"))
    assert len(findings(sarif, budget=Checks(4))) == 3  # one check for the run, one per result
    for allowed in (0, 1, 3):
        with pytest.raises(DomainError):
            mapped(sarif, budget=Checks(allowed))


def test_paths_through_chains_of_relative_bases() -> None:
    def path(uri: str, base: Any, bases: dict[str, Any]) -> str:
        location = {"uri": uri} | ({"uriBaseId": base} if base else {})
        return file_of({"artifactLocation": location}, originalUriBaseIds=bases)

    assert path("a.py", "SRC", {"SRC": {"uri": "src//", "uriBaseId": "PKG"}, "PKG": {"uri": "pkg"}}) == "pkg/src/a.py"
    assert path("a.py", "SRC", {"SRC": {"uri": "src/", "uriBaseId": "ROOT"}, "ROOT": {"uri": "file:///w/"}}) == (
        "src/a.py"
    )
    assert path("a.py", "SRC", {"SRC": {"uri": "src/", "uriBaseId": 3}}) == "src/a.py"
    assert path("a.py", "SRC", {"SRC": {"uri": "/", "uriBaseId": "PKG"}, "PKG": {"uri": "pkg/"}}) == "pkg/a.py"
    assert path("a.py", "SRC", {"SRC": {"uri": "/"}}) == "a.py"  # a base of "/" adds no leading slash
    assert path("a.py", "SRC", {"SRC": {"uri": "X"}}) == "X/a.py"
    assert path("a.py#L3", None, {}) == "a.py"  # a fragment is no part of the path
    unhashable: Any = ["SRC"]
    assert path("a.py", unhashable, {"SRC": {"uri": "src/"}}) == "a.py"
    assert path("a.py", "SRC", {"SRC": {"uriBaseId": "PKG"}, "PKG": {"uri": "pkg/"}}) == "a.py"  # %SRCROOT%-like
    assert path("a.py", "NONE", {"SRC": {"uri": "src/"}}) == "a.py"
    assert path("a.py", None, {"SRC": {"uri": "src/"}}) == "a.py"
    assert path("a%20b.py?x=1#L3", "SRC", {"SRC": {"uri": "s%2Fc/"}}) == "s/c/a b.py"
    sixteen = {f"B{n}": {"uri": f"d{n}/", "uriBaseId": f"B{n + 1}"} for n in range(16)}
    assert path("a.py", "B0", sixteen) == "/".join(f"d{n}" for n in reversed(range(16))) + "/a.py"
    seventeen = {f"B{n}": {"uri": f"d{n}/", "uriBaseId": f"B{n + 1}"} for n in range(17)}
    assert the_error(log(result(), originalUriBaseIds=seventeen)) == (
        "runs[0].originalUriBaseIds.B0",
        "must reach an absolute or undefined base within 16 steps (no cycle)",
    )
    cycle = {"A": {"uri": "a/", "uriBaseId": "B"}, "B": {"uri": "b/", "uriBaseId": "A"}}
    assert the_error(log(result(), originalUriBaseIds=cycle))[0] == "runs[0].originalUriBaseIds.A"


def test_bases_at_their_limits() -> None:
    bases = {f"B{n}": {"uri": f"d{n}/"} for n in range(MAX_BASES)}
    assert file_of({"artifactLocation": {"uri": "a.py", "uriBaseId": "B99"}}, originalUriBaseIds=bases) == "d99/a.py"
    assert the_error(log(result(), originalUriBaseIds=bases | {"B100": {}})) == (
        "runs[0].originalUriBaseIds",
        "must have at most 100 entries",
    )
    longest = {"B": {"uri": "d" * (MAX_URI - 1) + "/"}}
    based = result()
    based["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"] = "B"
    assert the_error(log(based, originalUriBaseIds=longest)) == (
        URI,
        "must be at most 500 bytes",
    )  # a base of MAX_URI characters is read; the path it makes is too long
    assert the_error(log(result(), originalUriBaseIds={"B": {"uri": "d" * (MAX_URI + 1)}})) == (
        "runs[0].originalUriBaseIds.B.uri",
        "must be at most 2000 characters",
    )
    # each base within bounds, the chain standing for more than a URI may
    chain = {"A": {"uri": "a" * 1500, "uriBaseId": "B"}, "B": {"uri": "b" * 498}}  # 2,000 with the slashes
    assert file_of({"artifactLocation": {"uri": "x.py"}}, originalUriBaseIds=chain) == "x.py"
    assert the_error(log(result(), originalUriBaseIds=chain | {"B": {"uri": "b" * 499}})) == (
        "runs[0].originalUriBaseIds.A",
        "must stand for at most 2000 characters",
    )


def test_absolute_uris_cut_at_the_longest_base() -> None:
    bases = {"ROOT": {"uri": "file:///w/repo"}, "SRC": {"uri": "file:///w/repo/src/"}, "REL": {"uri": "rel/"}}
    assert file_of({"artifactLocation": {"uri": "file:///w/repo/src/a.py"}}, originalUriBaseIds=bases) == "a.py"
    assert file_of({"artifactLocation": {"uri": "file:///w/repo/lib/b.py"}}, originalUriBaseIds=bases) == "lib/b.py"
    assert file_of(
        {"artifactLocation": {"uri": "https://h/x/c.py"}}, originalUriBaseIds={"H": {"uri": "https://h/"}}
    ) == ("x/c.py")
    where, message = the_error(log(result("file:///w/repository/a.py"), originalUriBaseIds=bases))
    assert where == URI and message.startswith("must be relative to the repository: no originalUriBaseIds entry")


def test_absolute_file_uris_under_the_named_checkout_root() -> None:
    assert one(log(result("file:///w/repo/src/a%20b.py")), source_root="/w/repo")["file"] == "src/a b.py"
    assert one(log(result("file:///w/repo/a.py")), source_root="/w/repo///")["file"] == "a.py"
    assert the_error(log(result("file:///w/repository/a.py")), source_root="/w/repo") == (
        URI,
        "lies outside the checkout root /w/repo (source_root)",
    )
    assert the_error(log(result("file:///w/Y/a.py")), source_root="/w/X/") == (
        URI,
        "lies outside the checkout root /w/X (source_root)",
    )
    unrooted = (
        URI,
        "must be relative to the repository: no originalUriBaseIds entry is a prefix of it; name the checkout root "
        "it lies under (?source_root=/abs/path on the API, --source-root DIR on the CLI)",
    )
    assert the_error(log(result("https://h/a.py")), source_root="/w/repo") == unrooted  # not a file: URI
    assert the_error(log(result("file:///w/repo/a.py")), source_root="") == unrooted


def test_the_checkout_root_itself() -> None:
    assert normalize_source_root(None) is None and normalize_source_root("") is None
    assert normalize_source_root("/w/repo") == "/w/repo/" and normalize_source_root("/") == "/"
    assert normalize_source_root("/w/X") == "/w/X/"
    assert normalize_source_root("/" + "d" * (MAX_URI - 1)) == "/" + "d" * (MAX_URI - 1) + "/"
    for bad in ("w/repo", "/" + "d" * MAX_URI, "/w/\x00"):
        with pytest.raises(ValidationError) as info:
            normalize_source_root(bad)
        assert info.value.errors == {"source_root": ["must be an absolute path of at most 2000 characters"]}


def test_uris_refused_naming_the_rule() -> None:
    assert the_error(log(result("u" * (MAX_URI + 1)))) == (URI, "must be at most 2000 characters")
    assert the_error(log(result("http://[oops/a.py"))) == (URI, "must be a valid URI reference")
    assert the_error(log(result("a/../../b.py"))) == (URI, "must not contain .. segments")
    assert one(log(result("./" * 998 + "a.py")))["file"] == "a.py"  # MAX_URI characters: read


def test_the_file_through_the_runs_artifacts() -> None:
    artifacts = [{"location": {"uri": "zero.py"}}, {"location": {"uri": "one.py", "uriBaseId": "SRC"}}, "x"]
    run: dict[str, Any] = {"artifacts": artifacts, "originalUriBaseIds": {"SRC": {"uri": "src/"}}}
    assert file_of({"artifactLocation": {"index": 1}}, **run) == "src/one.py"
    assert file_of({"artifactLocation": {"index": 0}}, **run) == "zero.py"
    assert file_of({"artifactLocation": {"uri": "own.py", "index": 0}}, **run) == "own.py"
    for index in (-1, 3, 2, "0"):
        found = result()
        found["locations"] = [{"physicalLocation": {"artifactLocation": {"index": index}}}]
        assert mapped(log(found, **run)).skipped["no_location"] == 1
