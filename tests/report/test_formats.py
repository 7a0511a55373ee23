"""The CI formats (sarif, github, junit, gitlab): snapshots, the SARIF schema, escaping, and the CLI.

Snapshots: each format renders `fixed_report()` (a hand-built report: relative, absolute, outside and
hub sources, rows with and without a line, all three severities, messages with characters that need
escaping) with the working folder set to a temporary folder; the output must equal
tests/report/snapshots/<format>.<ext>. The SARIF snapshot replaces each rule's docstring and summary
with markers (checked against the rule separately), so editing a rule's documentation does not
churn it.

To refresh the snapshots after an intended change, run

    VLMLINT_UPDATE_SNAPSHOTS=1 pytest tests/report/test_formats.py

and review `git diff tests/report/snapshots` before committing.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import PROCESSORS
from vlmlint.aggregate import Summary
from vlmlint.cli import app
from vlmlint.report.ci import artifact_path, located_findings
from vlmlint.report.formats import ReportInput, render
from vlmlint.report.github import escape_data, escape_property
from vlmlint.rules import RULES_BY_CODE

HERE = Path(__file__).parent
SNAPSHOTS = HERE / "snapshots"
SCHEMA = json.loads((HERE / "sarif-schema-2.1.0.json").read_text())
EXTENSIONS = {"sarif": "json", "github": "txt", "junit": "xml", "gitlab": "json"}
MODEL = str(PROCESSORS / "qwen2-vl-small")
GITHUB_LINE = re.compile(r"^::(error|warning|notice) file=[^,:]+(,line=\d+)?,title=VLM\d{3} [a-z-]+::.+$")


def finding(code, source, line, index, row_id, message, fix, severity=None):
    rule = RULES_BY_CODE[code]
    return {
        "code": code,
        "name": rule.name,
        "severity": severity or rule.severity.value,
        "message": message,
        "fix": fix,
        "source": source,
        "line": line,
        "index": index,
        "id": row_id,
    }


def fixed_report(cwd: Path) -> dict:
    inside = str(cwd / "data" / "train.jsonl")  # absolute, under the working folder
    return {
        "vlmlint_version": "0.0.0-test",
        "model": {"name": "qwen2-vl"},
        "settings": {"dataset": "data", "fail_on": "warning"},
        "summary": {"samples": 120, "samples_with_findings": 5},
        "findings": [
            finding(
                "VLM301",
                inside,
                23,
                22,
                "r-22",
                "2 image placeholder(s) in the text but 1 image(s) in the row",
                "remove the 2nd <image> placeholder or add the missing image",
            ),
            finding(
                "VLM103",
                inside,
                40,
                39,
                "r-39",
                "image 1 not found: a,b 100%.jpg",
                "restore the file, fix the path, or pass --image-root",
            ),
            finding(
                "VLM103",
                inside,
                40,
                39,
                "r-39",
                "image 2 not found: c:d.jpg",
                "restore the file, fix the path, or pass --image-root",
            ),
            finding(
                "VLM405",
                "data/train.jsonl",
                57,
                56,
                None,
                "sequence of 4,000 tokens is 97% of --max-length 4096",
                "raise --max-length to 4608 or shorten the row",
            ),
            finding(
                "VLM101",
                "/outside/mix.json",
                7,
                3,
                None,
                'JSON array is malformed after item 3: lexical error\n  {"id": & <x>\r\n  (right here) ---^',
                "fix the row to match its layout, or remove it",
            ),
            finding(
                "VLM208",
                "data/table.parquet",
                None,
                12,
                "p12",
                "image 1 shrinks 20.5x in area (4000x3000 -> 896x672)",
                "resize the image offline",
            ),
            finding(
                "VLM107",
                "org/dataset[train]",
                None,
                3,
                "dup",
                "id 'dup' was already used by the row at item 1 of this file",
                "give this row its own id",
            ),
        ],
    }


def rendered(name: str, report: dict) -> str:
    return render(name, ReportInput(report=report, summary=Summary(), model_name="qwen2-vl"))


def normalised_sarif(text: str) -> str:
    """The SARIF log with each rule's docstring replaced by a marker (checked in its own test)."""
    log = json.loads(text)
    for rule in log["runs"][0]["tool"]["driver"]["rules"]:
        rule["shortDescription"]["text"] = f"<{rule['id']} summary>"
        for key in ("fullDescription", "help"):
            for part in rule.get(key, {}):
                rule[key][part] = f"<{rule['id']} docstring>"
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", list(EXTENSIONS))
def test_snapshot(name, workdir):
    text = rendered(name, fixed_report(workdir))
    if name == "sarif":
        text = normalised_sarif(text)
    snapshot = SNAPSHOTS / f"{name}.{EXTENSIONS[name]}"
    if os.environ.get("VLMLINT_UPDATE_SNAPSHOTS"):
        snapshot.parent.mkdir(exist_ok=True)
        snapshot.write_bytes(text.encode())
    assert snapshot.is_file(), f"no snapshot {snapshot}: run with VLMLINT_UPDATE_SNAPSHOTS=1"
    assert text == snapshot.read_bytes().decode(), f"{name} changed; see this module's docstring"


def validate_sarif(log: dict) -> None:
    validator = jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_committed_schema_is_the_full_official_one():
    assert SCHEMA["id"].endswith("/sarif-schema-2.1.0.json") and SCHEMA["title"].startswith("Static Analysis")
    assert len(SCHEMA["definitions"]) == 52  # every SARIF 2.1.0 object, result to webResponse
    assert {"result", "run", "reportingDescriptor", "physicalLocation", "region"} <= set(
        SCHEMA["definitions"]
    )


def test_sarif_is_valid_and_points_at_files_and_lines(workdir):
    log = json.loads(rendered("sarif", fixed_report(workdir)))
    validate_sarif(log)
    run = log["runs"][0]
    assert run["invocations"] == [{"executionSuccessful": True}]
    rules = run["tool"]["driver"]["rules"]
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    first, outside, parquet = run["results"][0], run["results"][4], run["results"][5]
    assert first["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "data/train.jsonl", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 23},
    }
    assert (
        first["level"] == "error" and parquet["level"] == "note" and run["results"][3]["level"] == "warning"
    )
    assert outside["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "file:///outside/mix.json"
    }
    assert "region" not in parquet["locations"][0]["physicalLocation"]
    assert parquet["message"]["text"].startswith("item 12: ") and parquet["properties"] == {
        "index": 12,
        "id": "p12",
    }
    invalid = json.loads(json.dumps(log))
    invalid["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(AssertionError):
        validate_sarif(invalid)  # the schema check does catch a bad log


def test_sarif_rules_carry_each_rules_docstring(workdir):
    rules = json.loads(rendered("sarif", fixed_report(workdir)))["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["VLM101", "VLM103", "VLM107", "VLM208", "VLM301", "VLM405"]
    for descriptor in rules:
        rule = RULES_BY_CODE[descriptor["id"]]
        assert descriptor["name"] == rule.name
        assert descriptor["shortDescription"]["text"] == rule.summary()
        assert descriptor["fullDescription"]["text"] == rule.documentation() == descriptor["help"]["markdown"]
        level = descriptor["defaultConfiguration"]["level"]
        assert level == {"error": "error", "warning": "warning", "info": "note"}[rule.severity.value]


def test_fingerprints_are_stable_distinct_and_ignore_the_message(workdir):
    report = fixed_report(workdir)
    prints = [item.fingerprint for item in located_findings(report)]
    assert len(set(prints)) == len(prints)  # the two VLM103 findings of one row differ
    assert all(re.fullmatch(r"[0-9a-f]{32}", p) for p in prints)
    report["findings"][0]["message"] = "3 image placeholder(s) in the text but 1 image(s) in the row"
    report["findings"][0]["source"] = "data/train.jsonl"  # the same file, written relatively
    assert [item.fingerprint for item in located_findings(report)] == prints
    gitlab = json.loads(rendered("gitlab", report))
    sarif = json.loads(rendered("sarif", report))["runs"][0]["results"]
    assert (
        [g["fingerprint"] for g in gitlab]
        == [r["partialFingerprints"]["vlmlint/v1"] for r in sarif]
        == prints
    )


def test_artifact_paths(tmp_path):
    (tmp_path / "saved").mkdir()
    assert artifact_path(str(tmp_path / "a" / "b.json"), str(tmp_path)) == ("a/b.json", True)
    assert artifact_path("./a//b.json", str(tmp_path)) == ("a/b.json", True)
    assert artifact_path("/elsewhere/b.json", str(tmp_path)) == ("/elsewhere/b.json", False)
    assert artifact_path(str(tmp_path / "saved") + "[train]", str(tmp_path)) == ("saved", True)
    assert artifact_path("org/name[train]", str(tmp_path)) == ("org/name[train]", True)


def test_github_escapes_as_the_actions_toolkit_does():
    assert escape_data("50% done\r\nnext: a,b") == "50%25 done%0D%0Anext: a,b"
    assert escape_property("dir,1/a:b%.json") == "dir%2C1/a%3Ab%25.json"


def test_github_lines_are_workflow_commands_only(workdir):
    lines = rendered("github", fixed_report(workdir)).splitlines()
    assert len(lines) == 7 and all(GITHUB_LINE.match(line) for line in lines), lines
    assert lines[0].startswith(
        "::error file=data/train.jsonl,line=23,title=VLM301 placeholder-count-mismatch::"
    )
    assert lines[3].startswith("::warning ") and lines[5].startswith(
        "::notice file=data/table.parquet,title="
    )
    assert "%0A" in lines[4] and "\r" not in lines[4]


def test_junit_counts_and_fail_level(workdir):
    root = ET.fromstring(rendered("junit", fixed_report(workdir)))
    suite = root.find("testsuite")
    assert suite.get("name") == "vlmlint"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("7", "6", "0")
    cases = suite.findall("testcase")
    assert [c.find("failure") is not None for c in cases] == [True] * 5 + [False, True]  # info passes
    assert cases[0].get("file") == "data/train.jsonl" and cases[0].get("line") == "23"
    assert cases[5].find("system-out").text.startswith("info: image 1 shrinks")


def test_junit_without_findings_has_one_passing_case(workdir):
    report = {**fixed_report(workdir), "findings": []}
    suite = ET.fromstring(rendered("junit", report)).find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    assert suite.find("testcase").find("failure") is None


def test_junit_survives_control_characters(workdir):
    report = fixed_report(workdir)
    report["findings"][0]["message"] = "bad \x00 byte \x1b"
    ET.fromstring(rendered("junit", report))  # parses: characters XML cannot carry are replaced


def test_gitlab_code_quality_fields(workdir):
    issues = json.loads(rendered("gitlab", fixed_report(workdir)))
    assert [i["severity"] for i in issues] == ["major", "major", "major", "minor", "major", "info", "minor"]
    assert issues[0]["location"] == {"path": "data/train.jsonl", "lines": {"begin": 23}}
    assert issues[5]["location"] == {"path": "data/table.parquet", "lines": {"begin": 1}}
    assert issues[0]["check_name"] == "VLM301" and "fix: remove the 2nd" in issues[0]["description"]


# The CLI: a tiny dataset with one good row and one missing image, scanned in its own folder.
GOOD = {
    "id": "g",
    "image": "a.jpg",
    "conversations": [{"from": "human", "value": "<image>\nHi"}, {"from": "gpt", "value": "Yo"}],
}


@pytest.fixture
def tiny(workdir):
    Image.new("RGB", (64, 48), "red").save(workdir / "a.jpg")
    rows = [GOOD, {**GOOD, "id": "m", "image": "missing.jpg"}]
    (workdir / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return workdir


def scan(*args):
    return CliRunner().invoke(app, ["scan", "data.jsonl", "--model", MODEL, "-q", "--verify", "0", *args])


def test_cli_sarif(tiny):
    result = scan("--format", "sarif")
    assert result.exit_code == 1, result.output
    log = json.loads(result.stdout)
    validate_sarif(log)
    (only,) = log["runs"][0]["results"]
    assert only["ruleId"] == "VLM103"
    location = only["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "data.jsonl" and location["region"] == {"startLine": 2}


def test_cli_github(tiny):
    result = scan("--format", "github")
    assert result.exit_code == 1, result.output
    (line,) = result.stdout.splitlines()
    assert GITHUB_LINE.match(line) and line.startswith("::error file=data.jsonl,line=2,title=VLM103 ")


def test_cli_junit(tiny):
    result = scan("--format", "junit")
    assert result.exit_code == 1, result.output
    suite = ET.fromstring(result.stdout).find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("1", "1")


def test_cli_gitlab(tiny):
    result = scan("--format", "gitlab")
    assert result.exit_code == 1, result.output
    (issue,) = json.loads(result.stdout)
    assert issue["check_name"] == "VLM103" and issue["location"] == {
        "path": "data.jsonl",
        "lines": {"begin": 2},
    }


def test_cli_output_file_and_clean_exit(tiny):
    result = scan("--format", "sarif", "-o", "out.sarif", "--fail-on", "error", "--ignore", "VLM103")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    validate_sarif(json.loads((tiny / "out.sarif").read_text()))
    clean = scan("--format", "github", "--ignore", "VLM103")
    assert clean.exit_code == 0 and clean.stdout == ""


def test_sarif_marks_an_interrupted_scan():
    import json as _json

    from vlmlint.aggregate import Summary
    from vlmlint.report.formats import ReportInput
    from vlmlint.report.sarif import render

    report = {"vlmlint_version": "0", "model": {}, "settings": {}, "summary": {}, "findings": []}
    report["incomplete"] = {"reason": "interrupted by SIGTERM", "rows_scanned": 5}
    sarif = _json.loads(render(ReportInput(report=report, summary=Summary(), model_name="m")))
    invocation = sarif["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert "SIGTERM" in invocation["toolExecutionNotifications"][0]["message"]["text"]


def test_artifact_paths_are_relative_to_the_repository_root(tmp_path, monkeypatch):
    """Run from a subfolder of a checkout, paths still start at the repository root (issue 22)."""
    (tmp_path / ".git").mkdir()
    data = tmp_path / "data" / "sft"
    data.mkdir(parents=True)
    (data / "rows.jsonl").write_text("{}\n")
    monkeypatch.chdir(data)
    assert artifact_path("rows.jsonl") == ("data/sft/rows.jsonl", True)
    assert artifact_path(str(data / "rows.jsonl")) == ("data/sft/rows.jsonl", True)
    assert artifact_path("org/name[train]") == ("org/name[train]", True)  # not a file: as it is


def test_root_sets_the_base_of_ci_paths(tmp_path, monkeypatch):
    """--root: paths relative to the folder given, not the git toplevel (issue 22)."""
    (tmp_path / ".git").mkdir()
    data = tmp_path / "data" / "sft"
    data.mkdir(parents=True)
    (data / "rows.jsonl").write_text("{}\n")
    monkeypatch.chdir(data)
    assert artifact_path("rows.jsonl", root=str(tmp_path / "data")) == ("sft/rows.jsonl", True)
    outside = artifact_path("rows.jsonl", root=str(tmp_path / "elsewhere"))
    assert outside == ((data / "rows.jsonl").as_posix(), False)


@pytest.mark.parametrize("output_format", ["sarif", "github", "gitlab", "junit"])
def test_cli_root_option(tiny, output_format):
    (tiny / "sub").mkdir()
    (tiny / "sub" / "data.jsonl").write_text((tiny / "data.jsonl").read_text())
    (tiny / "sub" / "a.jpg").write_bytes((tiny / "a.jpg").read_bytes())
    args = ["sub/data.jsonl", "--model", MODEL, "-q", "--verify", "0", "-f", output_format, "--root", "sub"]
    result = CliRunner().invoke(app, ["scan", *args])
    assert result.exit_code == 1, result.output
    assert "sub/data.jsonl" not in result.stdout and "data.jsonl" in result.stdout


def test_cli_root_must_be_a_folder(tiny):
    result = scan("--root", "no-such-folder")
    assert result.exit_code == 2 and "--root no-such-folder: no such folder" in result.output
