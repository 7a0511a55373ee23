"""The `sarif` format: SARIF 2.1.0, for GitHub code scanning and other SARIF viewers.

One run; the driver lists the rules that fired (id = code, name, descriptions and help from the
rule's docstring, default level), and each finding is a result pointing at its manifest file and
line (`region.startLine`; no region when the row has no line, e.g. a parquet row, whose item index
is then in the message and in the result's properties).
Paths under the working folder are relative with uriBaseId %SRCROOT% (GitHub resolves them against
the checkout); others are file:// URIs. partialFingerprints carry a hash of rule, file and row so a
viewer keeps tracking a finding while its message's numbers change.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any
from urllib.parse import quote

from vlmlint.report.ci import INFORMATION_URI, Located, located_findings
from vlmlint.report.formats import ReportInput
from vlmlint.rules import ALL_RULES, RULES_BY_CODE
from vlmlint.version import __version__

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
FINGERPRINT_KEY = "vlmlint/v1"
# The rule groups by the code's first digit (README "Rules"), shown as tags by SARIF viewers.
GROUPS = {
    "1": "rows",
    "2": "images",
    "3": "placeholders",
    "4": "lengths",
    "5": "pretokenized",
    "9": "self-check",
}


def render(report: ReportInput) -> str:
    from vlmlint.report.json_report import dumps

    return dumps(sarif_log(report.report, root=report.root)).decode() + "\n"


def sarif_log(report: dict[str, Any], cwd: str | None = None, root: str | None = None) -> dict[str, Any]:
    located = list(located_findings(report, cwd, root))
    # The rules that fired, in catalogue order (the report does not say which rules ran).
    fired = {item.code: item.finding for item in located}
    codes = [rule.code for rule in ALL_RULES if rule.code in fired]
    codes += sorted(code for code in fired if code not in RULES_BY_CODE)
    rules = [_rule_descriptor(code, fired[code]) for code in codes]
    index = {code: i for i, code in enumerate(codes)}
    model = report.get("model") or {}
    summary = report.get("summary") or {}
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "vlmlint",
                "version": report.get("vlmlint_version", __version__),
                "semanticVersion": report.get("vlmlint_version", __version__),
                "informationUri": INFORMATION_URI,
                "rules": rules,
            }
        },
        "invocations": [_invocation(report.get("incomplete"))],
        "columnKind": "unicodeCodePoints",
        "results": [_result(item, index[item.code]) for item in located],
        "properties": {
            "model": model.get("name"),
            "samples": summary.get("samples"),
            "samplesWithFindings": summary.get("samples_with_findings"),
        },
    }
    if report.get("transformers_version"):  # the transformers release whose processors the counts follow
        run["tool"]["driver"]["properties"] = {"transformersVersion": report["transformers_version"]}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _rule_descriptor(code: str, finding: dict[str, Any]) -> dict[str, Any]:
    rule = RULES_BY_CODE.get(code)
    if rule is None:  # a code no rule class declares (should not happen): still a valid ruleIndex
        name = finding.get("name") or code
        level = LEVELS.get(finding.get("severity", ""), "warning")
        return {
            "id": code,
            "name": name,
            "shortDescription": {"text": name},
            "defaultConfiguration": {"level": level},
        }
    documentation = rule.documentation()
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary()},
        "fullDescription": {"text": documentation},
        "help": {"text": documentation, "markdown": documentation},
        "defaultConfiguration": {"level": LEVELS[rule.severity.value]},
        "properties": {"tags": [GROUPS.get(rule.code[3], "other")]},
    }


def _artifact_location(item: Located) -> dict[str, Any]:
    if item.relative:
        return {"uri": quote(item.path, safe="/"), "uriBaseId": "%SRCROOT%"}
    return {"uri": PurePath(item.path).as_uri() if PurePath(item.path).is_absolute() else item.path}


def _result(item: Located, rule_index: int) -> dict[str, Any]:
    finding = item.finding
    physical: dict[str, Any] = {"artifactLocation": _artifact_location(item)}
    if item.line is not None:
        physical["region"] = {"startLine": item.line}
    properties = {"index": finding.get("index")}
    if finding.get("id") is not None:
        properties["id"] = finding["id"]
    return {
        "ruleId": item.code,
        "ruleIndex": rule_index,
        "level": LEVELS.get(finding.get("severity", ""), "warning"),
        "message": {"text": item.text},
        "locations": [{"physicalLocation": physical}],
        "partialFingerprints": {FINGERPRINT_KEY: item.fingerprint},
        "properties": properties,
    }


def _invocation(incomplete: dict | None) -> dict:
    """A scan stopped by a signal did not finish: SARIF viewers show why."""
    if not incomplete:
        return {"executionSuccessful": True}
    return {
        "executionSuccessful": False,
        "toolExecutionNotifications": [
            {"level": "error", "message": {"text": f"{incomplete['reason']}: partial results"}}
        ],
    }
