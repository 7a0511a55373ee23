"""Baselines: accepted findings keyed by rule code + row content, surviving moves and insertions."""

from __future__ import annotations

import json

import orjson
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import PROCESSORS
from vlmlint.baseline import BASELINE_VERSION, BaselineError, baseline_document, load_baseline
from vlmlint.cli import app
from vlmlint.readers import iter_samples
from vlmlint.readers.fingerprint import row_fingerprint

MODEL = str(PROCESSORS / "qwen2-vl-small")
runner = CliRunner()


def good(n: int) -> dict:
    return {
        "id": f"g{n}",
        "image": "a.jpg",
        "conversations": [{"from": "human", "value": f"<image>\nHi {n}"}, {"from": "gpt", "value": "Yo"}],
    }


def missing(n: int) -> dict:
    return {**good(n), "id": f"m{n}", "image": f"missing{n}.jpg"}


def write_rows(folder, rows) -> str:
    if not (folder / "a.jpg").exists():
        Image.new("RGB", (640, 480), "red").save(folder / "a.jpg")
    path = folder / "data.jsonl"
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return str(path)


def scan(*args):
    return runner.invoke(app, ["scan", *args, "--model", MODEL, "--verify", "0", "-q"])


ROWS = [good(1), "{broken", missing(1), good(2), missing(2)]


@pytest.fixture
def baselined(tmp_path):
    """A dataset with three findings and a baseline of them."""
    data = write_rows(tmp_path, ROWS)
    baseline = tmp_path / "baseline.json"
    result = scan(data, "--write-baseline", str(baseline))
    assert result.exit_code == 0, result.output  # findings, yet accepted
    assert "wrote 3 finding(s)" in result.stderr
    return tmp_path, data, str(baseline)


def report(result) -> dict:
    return orjson.loads(result.stdout)


def test_written_baseline_is_sorted_versioned_and_stable(baselined):
    folder, data, baseline = baselined
    document = orjson.loads(open(baseline, "rb").read())
    assert document["version"] == BASELINE_VERSION and "vlmlint baseline" in document["_comment"]
    entries = document["findings"]
    assert [e["code"] for e in entries] == ["VLM101", "VLM103", "VLM103"]
    assert entries == sorted(entries, key=lambda e: (e["code"], e["fingerprint"]))
    assert all(e["count"] == 1 and len(e["fingerprint"]) == 32 for e in entries)
    assert "line" not in entries[0]  # keyed by content, never by position
    again = folder / "again.json"
    write_rows(folder, list(reversed(ROWS)))
    assert scan(data, "--write-baseline", str(again)).exit_code == 0
    assert again.read_bytes() == open(baseline, "rb").read()  # same findings, same file


def test_rescan_with_the_baseline_is_clean(baselined):
    _, data, baseline = baselined
    result = scan(data, "--baseline", baseline, "--format", "json")
    assert result.exit_code == 0, result.output
    assert report(result)["findings"] == []
    assert report(result)["summary"]["baseline"] == {"file": baseline, "suppressed": 3, "stale": 0}
    assert "3 finding(s) suppressed, 0 stale" in result.stderr


def test_only_a_new_bad_row_is_reported(baselined):
    folder, _, baseline = baselined
    data = write_rows(folder, [*ROWS, missing(3)])
    result = scan(data, "--baseline", baseline, "--format", "json")
    assert result.exit_code == 1
    findings = report(result)["findings"]
    assert [(f["code"], f["id"]) for f in findings] == [("VLM103", "m3")]
    assert report(result)["summary"]["baseline"]["suppressed"] == 3


@pytest.mark.parametrize(
    "rows",
    [
        [ROWS[4], ROWS[3], ROWS[2], ROWS[1], ROWS[0]],  # shuffled
        [good(7), good(8), *ROWS],  # rows inserted above
        [
            '{"id": "m1",  "conversations": '
            + json.dumps(missing(1)["conversations"])
            + ', "image": "missing1.jpg"}'
        ]
        + [ROWS[0], ROWS[1], ROWS[3], ROWS[4]],  # another key order and spacing: same content
    ],
    ids=["shuffled", "inserted-above", "reformatted"],
)
def test_moved_rows_stay_suppressed(baselined, rows):
    folder, _, baseline = baselined
    result = scan(write_rows(folder, rows), "--baseline", baseline, "--format", "json")
    assert result.exit_code == 0, result.output
    assert report(result)["summary"]["baseline"] == {"file": baseline, "suppressed": 3, "stale": 0}


def test_fixed_rows_are_counted_stale(baselined):
    folder, _, baseline = baselined
    data = write_rows(folder, [good(1), good(2), missing(2)])  # the broken line and m1 are gone
    result = scan(data, "--baseline", baseline, "--format", "json")
    assert result.exit_code == 0, result.output
    assert report(result)["summary"]["baseline"] == {"file": baseline, "suppressed": 1, "stale": 2}


def test_a_copy_of_a_baselined_row_is_reported(tmp_path):
    data = write_rows(tmp_path, [good(1), "{broken"])
    baseline = str(tmp_path / "b.json")
    assert scan(data, "--write-baseline", baseline).exit_code == 0
    write_rows(tmp_path, [good(1), "{broken", "{broken"])  # identical rows share a fingerprint
    result = scan(data, "--baseline", baseline, "--format", "json")
    assert result.exit_code == 1
    assert [f["line"] for f in report(result)["findings"]] == [3]
    # A baseline made with both copies counts 2 and suppresses both.
    assert scan(data, "--write-baseline", baseline).exit_code == 0
    assert orjson.loads(open(baseline, "rb").read())["findings"][0]["count"] == 2
    assert scan(data, "--baseline", baseline).exit_code == 0


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "No such file"),
        ("{not json", "not valid JSON"),
        ('{"version": 99, "findings": []}', "version 99"),
        ('{"version": 1}', "not a vlmlint baseline"),
        ('{"version": 1, "findings": [{"count": 1}]}', "entry 0"),
    ],
)
def test_a_bad_baseline_exits_2_with_one_line(tmp_path, content, message):
    data = write_rows(tmp_path, [good(1)])
    baseline = tmp_path / "bad.json"
    if content is not None:
        baseline.write_text(content)
    result = scan(data, "--baseline", str(baseline))
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_baseline_and_write_baseline_together_are_refused(tmp_path):
    data = write_rows(tmp_path, [good(1)])
    result = scan(data, "--baseline", "x.json", "--write-baseline", "y.json")
    assert result.exit_code == 2 and "cannot be combined" in result.stderr


def test_row_fingerprints_follow_content_not_form(tmp_path):
    row = missing(1)
    (tmp_path / "a.jsonl").write_text(
        json.dumps(row) + "\n" + json.dumps(row, indent=None, sort_keys=True) + "\n"
    )
    (tmp_path / "b.json").write_text(json.dumps([good(2), row], indent=2))
    jsonl = list(iter_samples(str(tmp_path / "a.jsonl")))
    array = list(iter_samples(str(tmp_path / "b.json")))
    assert jsonl[0].fingerprint == jsonl[1].fingerprint == array[1].fingerprint == row_fingerprint(row)
    assert array[0].fingerprint != array[1].fingerprint
    # Stored image bytes are hashed, not embedded; different bytes, different rows.
    assert row_fingerprint({"image": {"bytes": b"\x00" * 10}}) != row_fingerprint(
        {"image": {"bytes": b"\x01"}}
    )
    assert row_fingerprint({"n": 2**70}) == row_fingerprint({"n": 2**70})  # beyond orjson's integers


def test_malformed_lines_hash_their_bytes(tmp_path):
    (tmp_path / "a.jsonl").write_text("{broken\n{broken\r\n{other\n")
    first, second, third = iter_samples(str(tmp_path / "a.jsonl"))
    assert first.problems and first.fingerprint == second.fingerprint != third.fingerprint


def test_findings_carry_their_fingerprint_in_the_report(tmp_path):
    result = scan(write_rows(tmp_path, [missing(1)]), "--format", "json")
    (finding,) = report(result)["findings"]
    assert len(finding["fingerprint"]) == 32
    assert baseline_document([])["findings"] == []


def test_load_baseline_adds_repeated_entries(tmp_path):
    path = tmp_path / "b.json"
    entry = {"code": "VLM103", "fingerprint": "f" * 32, "count": 2}
    path.write_text(json.dumps({"version": 1, "findings": [entry, {**entry, "count": 1}]}))
    assert load_baseline(str(path)).remaining == {"f" * 32: 3}
    path.write_text(json.dumps({"version": 1, "findings": [{**entry, "count": 0}]}))
    with pytest.raises(BaselineError):
        load_baseline(str(path))
