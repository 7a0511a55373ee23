"""The `junit` format: JUnit XML for GitLab test reports, Jenkins and other CI test viewers.

Layout: `<testsuites>` holding one `<testsuite name="vlmlint">`, with **one test case per finding**
(not per rule): CI viewers show one failure message per test case, and a finding per case keeps
each row's file, line, message and fix visible on its own, with its own status.

- classname `vlmlint.VLM301`, name `VLM301 placeholder-count-mismatch at data.jsonl:23` (or
  `data.parquet item 12` when the row has no line); `file` and `line` attributes (GitLab shows
  the file).
- A finding at or above the scan's `--fail-on` level is a `<failure>` (message: the finding and
  its fix; type: the rule code; text: severity, location, row id). A finding below it is a passing
  test case whose `<system-out>` holds the same text, so the test report agrees with the exit code.
- A scan without findings gives one passing test case, `vlmlint scan`.

The suite's `tests`, `failures`, `errors` and `skipped` (always 0) count those cases; an interrupted
scan adds a test case `vlmlint scan incomplete` with an `<error>` (errors 1) and a property `incomplete`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import replace

from vlmlint.report.ci import Located, located_findings
from vlmlint.report.formats import ReportInput
from vlmlint.report.safe import printable

RANK = {"info": 0, "warning": 1, "error": 2}
# Characters XML 1.0 cannot carry (a malformed row's bytes can reach a message).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    # XML readers turn a raw CR into LF anyway; say so up front.
    return _NOT_XML.sub("\ufffd", text.replace("\r\n", "\n").replace("\r", "\n"))


def render(report: ReportInput) -> str:
    return junit_xml(report.report, root=report.root)


def junit_xml(report: dict, cwd: str | None = None, root: str | None = None) -> str:
    fail_on = RANK.get((report.get("settings") or {}).get("fail_on") or "error", 2)
    located = list(located_findings(report, cwd, root))
    root = ET.Element("testsuites", name="vlmlint")
    suite = ET.SubElement(root, "testsuite", name="vlmlint")
    properties = ET.SubElement(suite, "properties")
    summary = report.get("summary") or {}
    model = report.get("model") or {}
    for name, value in (
        ("vlmlint_version", report.get("vlmlint_version")),
        ("model", model.get("name")),
        ("samples", summary.get("samples")),
        ("samples_with_findings", summary.get("samples_with_findings")),
        ("fail_on", (report.get("settings") or {}).get("fail_on")),
    ):
        if value is not None:
            ET.SubElement(properties, "property", name=name, value=_clean(str(value)))
    failures = 0
    for item in located:
        failed = RANK.get(item.finding.get("severity", ""), 2) >= fail_on
        failures += failed
        _testcase(suite, item, failed)
    if not located:
        clean = ET.SubElement(suite, "testcase", classname="vlmlint", name="vlmlint scan", time="0")
        ET.SubElement(clean, "system-out").text = f"{summary.get('samples', 0)} rows, no findings"
    errors = 0
    incomplete = report.get("incomplete")
    if incomplete:  # an interrupted scan: an <error> case (and a property), not a pass
        from vlmlint.report.github import incomplete_text

        ET.SubElement(properties, "property", name="incomplete", value=_clean(str(incomplete.get("reason"))))
        case = ET.SubElement(suite, "testcase", classname="vlmlint", name="vlmlint scan incomplete", time="0")
        ET.SubElement(case, "error", message=_clean(incomplete_text(incomplete)), type="incomplete")
        errors = 1
    tests = max(1, len(located)) + errors
    for element in (root, suite):
        element.set("tests", str(tests))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
        element.set("skipped", "0")
        element.set("time", "0")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _testcase(suite: ET.Element, item: Located, failed: bool) -> None:
    # Names and messages come from the dataset: one line each (a raw newline in a name would be a
    # line of its own, e.g. a `::error` command, wherever the XML is printed).
    finding = {k: printable(v) if isinstance(v, str) else v for k, v in item.finding.items()}
    item = replace(item, finding=finding, path=printable(item.path))
    where = (
        f"{item.path}:{item.line}" if item.line is not None else f"{item.path} item {finding.get('index')}"
    )
    case = ET.SubElement(
        suite,
        "testcase",
        classname=f"vlmlint.{item.code}",
        name=_clean(f"{item.title} at {where}"),
        file=_clean(item.path),
        time="0",
    )
    if item.line is not None:
        case.set("line", str(item.line))
    details = [
        f"{finding.get('severity')}: {finding['message']}",
        f"fix: {finding.get('fix')}",
        f"at: {where}",
    ]
    if finding.get("id") is not None:
        details.append(f"row id: {finding['id']}")
    body = _clean("\n".join(details))
    if failed:
        failure = ET.SubElement(case, "failure", message=_clean(item.text), type=item.code)
        failure.text = body
    else:
        ET.SubElement(case, "system-out").text = body
