"""The command line: exit codes, output formats, stdout carrying the report only."""

from __future__ import annotations

import json

import orjson
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import PROCESSORS
from vlmlint.cli import app

MODEL = str(PROCESSORS / "qwen2-vl-small")
runner = CliRunner()


def make_dataset(folder, rows, *, images=(("a.jpg", (640, 480)),)):
    for name, size in images:
        Image.new("RGB", size, "red").save(folder / name)
    path = folder / "data.jsonl"
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return str(path)


GOOD = {
    "id": "g",
    "image": "a.jpg",
    "conversations": [{"from": "human", "value": "<image>\nHi"}, {"from": "gpt", "value": "Yo"}],
}


def scan(*args):
    return runner.invoke(app, ["scan", *args])


def test_clean_dataset_exits_0(tmp_path):
    result = scan(make_dataset(tmp_path, [GOOD]), "--model", MODEL)
    assert result.exit_code == 0, result.output
    assert "no findings" in result.output


def test_findings_exit_1_and_scan_reaches_the_end(tmp_path):
    rows = ["{broken", {**GOOD, "id": "m", "image": "missing.jpg"}, GOOD]
    result = scan(make_dataset(tmp_path, rows), "--model", MODEL, "--format", "json")
    assert result.exit_code == 1
    report = orjson.loads(result.stdout)
    assert report["summary"]["samples"] == 3
    assert report["summary"]["by_code"] == {"VLM101": 1, "VLM103": 1}
    assert [f["line"] for f in report["findings"]] == [1, 2]
    assert set(report) >= {"vlmlint_version", "model", "settings", "summary", "findings"}
    assert set(report["findings"][0]) >= {
        "code",
        "name",
        "severity",
        "message",
        "fix",
        "source",
        "line",
        "index",
        "id",
    }
    assert set(report["summary"]["seq_len"]) == {"min", "p50", "p90", "p99", "max"}


def test_missing_dataset_exits_2(tmp_path):
    result = scan(str(tmp_path / "nope.jsonl"), "--model", MODEL)
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_bad_model_exits_2(tmp_path):
    result = scan(make_dataset(tmp_path, [GOOD]), "--model", str(tmp_path))
    assert result.exit_code == 2
    assert "preprocessor_config.json" in result.output


def test_usage_error_exits_2(tmp_path):
    assert scan(make_dataset(tmp_path, [GOOD]), "--no-such-flag").exit_code == 2
    assert scan(make_dataset(tmp_path, [GOOD]), "--model", MODEL, "--format", "xml").exit_code == 2


def test_fail_on_warning_counts_warnings(tmp_path):
    row = {**GOOD, "image": "https://example.com/a.jpg"}
    path = make_dataset(tmp_path, [row])
    assert scan(path, "--model", MODEL).exit_code == 0
    assert scan(path, "--model", MODEL, "--fail-on", "warning").exit_code == 1


def test_max_length_flag_triggers_vlm401(tmp_path):
    path = make_dataset(tmp_path, [GOOD])
    result = scan(path, "--model", MODEL, "--max-length", "10", "--format", "jsonl")
    assert result.exit_code == 1
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    # 10 tokens also cut through the image's tokens: VLM402 beside VLM401
    assert [line["code"] for line in lines] == ["VLM401", "VLM402"]
    assert "raise --max-length to" in lines[0]["fix"]


def test_all_rows_jsonl_and_report_file(tmp_path):
    path = make_dataset(tmp_path, [GOOD, GOOD])
    report = tmp_path / "out" / "report.json"
    report.parent.mkdir()
    result = scan(path, "--model", MODEL, "--format", "jsonl", "--all-rows", "--report", str(report))
    assert result.exit_code == 0
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 2
    assert set(rows[0]) >= {
        "source",
        "line",
        "index",
        "id",
        "images",
        "image_tokens",
        "text_tokens",
        "seq_len",
        "findings",
    }
    assert rows[0]["images"][0]["width"] == 640 and rows[0]["image_tokens"][0] > 0
    assert rows[0]["seq_len"] == rows[0]["text_tokens"] + sum(rows[0]["image_tokens"])
    assert orjson.loads(report.read_bytes())["summary"]["samples"] == 2


def test_exact_mode_gives_the_same_counts(tmp_path):
    path = make_dataset(tmp_path, [GOOD], images=(("a.jpg", (1000, 333)),))
    fast = scan(path, "--model", MODEL, "--format", "jsonl", "--all-rows")
    exact = scan(path, "--model", MODEL, "--format", "jsonl", "--all-rows", "--exact")
    assert fast.stdout == exact.stdout


def test_no_chat_template_counts_fewer_tokens(tmp_path):
    path = make_dataset(tmp_path, [GOOD])
    with_template = orjson.loads(scan(path, "--model", MODEL, "--format", "jsonl", "--all-rows").stdout)
    raw = orjson.loads(
        scan(path, "--model", MODEL, "--format", "jsonl", "--all-rows", "--no-chat-template").stdout
    )
    assert raw["image_tokens"] == with_template["image_tokens"]
    assert raw["seq_len"] < with_template["seq_len"]


def test_rules_and_rule_commands():
    listed = runner.invoke(app, ["rules"])
    assert (
        listed.exit_code == 0 and "VLM301" in listed.output and "placeholder-count-mismatch" in listed.output
    )
    shown = runner.invoke(app, ["rule", "vlm401"])
    assert shown.exit_code == 0 and "**Fix**" in shown.output
    assert runner.invoke(app, ["rule", "VLM999"]).exit_code == 2


@pytest.mark.parametrize("fmt", ["text", "json", "jsonl"])
def test_stdout_is_only_the_report(tmp_path, fmt):
    result = scan(make_dataset(tmp_path, [GOOD]), "--model", MODEL, "--format", fmt)
    assert "PyTorch" not in result.stdout
    if fmt == "json":
        orjson.loads(result.stdout)


def test_broken_fixture_scan_reaches_the_end_and_exits_1():
    from tests.conftest import DATASETS, FIXTURES

    expected = json.loads((FIXTURES / "expected" / "broken.json").read_text())
    result = scan(
        str(DATASETS / "broken"), "--model", MODEL, "--format", "jsonl", "--all-rows", "--verify", "0"
    )
    assert result.exit_code == 1
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == len(expected["rows"])  # every row, bad ones included, is reported
    for row, spec in zip(rows, expected["rows"], strict=True):
        assert set(spec["codes"]) <= set(row["findings"]), (row["line"], row["findings"])


def test_output_files_are_readable_as_the_umask_allows(tmp_path):
    import os

    path = make_dataset(tmp_path, [GOOD])
    out, report = tmp_path / "out.json", tmp_path / "report.json"
    result = scan(path, "--model", MODEL, "--format", "json", "-o", str(out), "--report", str(report))
    assert result.exit_code == 0, result.output
    umask = os.umask(0)
    os.umask(umask)
    for written in (out, report):
        assert written.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
