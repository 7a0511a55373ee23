"""The Python API (vlmlint.check_batch and friends) gives what a scan of the same rows as a file gives."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys

import pytest

import vlmlint
from tests.conftest import DATASETS, PROCESSORS
from vlmlint.api import as_rows, scan_config
from vlmlint.config import ConfigError, ScanConfig, build_config
from vlmlint.engine import Scanner
from vlmlint.report import row_record

MODEL = str(PROCESSORS / "qwen2-vl-small")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's parseable rows, images as absolute paths in lists (one Arrow type), and the same as JSONL."""
    folder = tmp_path_factory.mktemp("api")
    shutil.copytree(DATASETS / "demo" / "images", folder / "images")
    rows = []
    for line in (DATASETS / "demo" / "data.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        images = row["image"] if isinstance(row["image"], list) else [row["image"]]
        row["image"] = [str(folder / image) for image in images]
        rows.append(row)
    rows.append({**rows[0], "id": rows[1]["id"]})  # a duplicate id: VLM107 within one call
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return folder, rows


def _settings(folder) -> dict:
    return {"model": MODEL, "image_root": str(folder)}


def _file_scan(folder):
    config = build_config(str(folder / "rows.jsonl"), {}, {"model": MODEL})
    return list(Scanner(config).scan())


def _comparable(finding: dict) -> dict:
    """A finding less where it is; VLM107's message names the first row's line, or its item number."""
    dropped = ("source", "line", "message") if finding["code"] == "VLM107" else ("source", "line")
    return {key: value for key, value in finding.items() if key not in dropped}


def test_list_of_dicts_equals_a_file_scan(demo):
    folder, rows = demo
    expected = _file_scan(folder)
    outcomes = vlmlint.check_rows(rows, _settings(folder))
    assert len(outcomes) == len(expected) == len(rows)
    for mine, theirs in zip(outcomes, expected, strict=True):
        a, b = row_record(mine), row_record(theirs)
        assert {**a, "source": None, "line": None} == {**b, "source": None, "line": None}
    findings = vlmlint.check_batch(rows, _settings(folder))
    assert [_comparable(f.to_dict()) for f in findings] == [
        _comparable(f.to_dict()) for o in expected for f in o.findings
    ]
    codes = {f.code for f in findings}
    assert {"VLM103", "VLM201", "VLM301", "VLM107"} <= codes
    assert {f.source for f in findings} == {"<batch>"} and {f.line for f in findings} == {None}


def test_dict_of_columns_and_dataframe(demo):
    pandas = pytest.importorskip("pandas")
    folder, rows = demo
    expected = [f.to_dict() for f in vlmlint.check_batch(rows, _settings(folder))]
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    assert [f.to_dict() for f in vlmlint.check_batch(columns, _settings(folder))] == expected
    frame = pandas.DataFrame(rows)
    assert [f.to_dict() for f in vlmlint.check_batch(frame, _settings(folder))] == expected
    import pyarrow

    assert [f.to_dict() for f in vlmlint.check_batch(pyarrow.Table.from_pylist(rows), _settings(folder))] == (
        expected
    )


def test_spark_style_frames(demo):
    """mapInPandas hands over pandas frames made from Arrow: numpy arrays in cells, dicts for structs."""
    pandas = pytest.importorskip("pandas")
    import pyarrow

    folder, rows = demo
    settings = _settings(folder)
    expected = [f.to_dict() for f in vlmlint.check_batch(rows, settings)]
    frame = pyarrow.Table.from_pylist(rows).to_pandas()
    assert type(frame["conversations"].iloc[0]).__module__ == "numpy"  # what Spark gives too
    # The docs' lint function (docs/scale.md), fed two batches as Spark would.
    findings_schema = (
        "code string, name string, severity string, message string, fix string, "
        "source string, line long, index long, id string, fingerprint string"
    )
    columns = [field.split()[0] for field in findings_schema.split(", ")]

    def lint(frames):
        for part in frames:
            findings = vlmlint.check_batch(part, settings, source="train")
            yield pandas.DataFrame([finding.to_dict() for finding in findings], columns=columns)

    halves = [frame.iloc[:20], frame.iloc[20:].reset_index(drop=True)]
    out = pandas.concat(list(lint(halves)), ignore_index=True)
    assert list(out.columns) == columns and set(out["source"]) == {"train"}
    assert sorted(out["code"]) == sorted(f["code"] for f in expected if f["code"] != "VLM107")
    assert [f.to_dict() for f in vlmlint.check_batch(frame, settings)] == expected
    extended = frame.assign(**vlmlint.row_columns(frame, settings))
    assert extended["vlmlint_ok"].dtype == bool and len(extended) == len(rows)


def test_sources_and_indices(demo):
    folder, rows = demo
    findings = vlmlint.check_batch(rows[:8], _settings(folder), source="part-3", indices=range(100, 108))
    assert findings and {f.source for f in findings} == {"part-3"}
    assert all(100 <= f.index < 108 for f in findings)
    with pytest.raises(ValueError, match="indices"):
        vlmlint.check_batch(rows[:2], _settings(folder), indices=[1])


def test_row_columns(demo):
    folder, rows = demo
    columns = vlmlint.row_columns(rows, _settings(folder))
    outcomes = vlmlint.check_rows(rows, _settings(folder))
    assert set(columns) == {
        "vlmlint_seq_len",
        "vlmlint_text_tokens",
        "vlmlint_image_tokens",
        "vlmlint_codes",
        "vlmlint_ok",
    }
    assert columns["vlmlint_seq_len"] == [o.result.seq_len for o in outcomes]
    assert columns["vlmlint_codes"] == [[f.code for f in o.findings] for o in outcomes]
    assert columns["vlmlint_ok"].count(False) == sum(
        any(f.severity.value == "error" for f in o.findings) for o in outcomes
    )


def test_datasets_map_with_processes(demo):
    datasets = pytest.importorskip("datasets")
    folder, rows = demo
    settings = _settings(folder)

    def lint(batch, indices):
        return vlmlint.row_columns(batch, settings, indices=indices)

    dataset = datasets.Dataset.from_list(rows)
    mapped = dataset.map(lint, batched=True, batch_size=8, with_indices=True, num_proc=2)
    expected = _file_scan(folder)
    assert mapped["vlmlint_seq_len"] == [o.result.seq_len for o in expected]
    assert mapped["vlmlint_image_tokens"] == [o.result.image_tokens for o in expected]
    # Duplicate ids are compared within one call (one batch of 8 here), not across the dataset.
    codes = [[code for code in row if code != "VLM107"] for row in mapped["vlmlint_codes"]]
    assert codes == [[f.code for f in o.findings if f.code != "VLM107"] for o in expected]


def test_model_loaded_once_per_setting(demo, monkeypatch):
    import vlmlint.api as api
    import vlmlint.engine as engine

    folder, rows = demo
    built = []
    original = engine.Scanner.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(api, "_cache", [])
    monkeypatch.setattr(engine.Scanner, "__init__", counting)
    for _ in range(3):
        vlmlint.check_batch(rows[:2], _settings(folder))
    vlmlint.check_batch(rows[:2], scan_config(_settings(folder)))
    assert len(built) == 1
    vlmlint.check_batch(rows[:2], {**_settings(folder), "max_length": 64})
    assert len(built) == 2


def test_settings_and_inputs_are_checked():
    with pytest.raises(ConfigError, match="unknown setting"):
        scan_config({"modle": "x"})
    config = scan_config({"model": MODEL, "max-length": 512, "select": "VLM3,VLM4"})
    assert config.max_length == 512 and config.select == ("VLM3", "VLM4") and config.jobs == 1
    assert scan_config(config) is config
    restored = pickle.loads(pickle.dumps(config))  # what Ray and Spark do with it
    assert isinstance(restored, ScanConfig) and restored == config
    with pytest.raises(TypeError, match="columns"):
        as_rows({"image": "a.jpg", "text": "one row, not columns"})
    with pytest.raises(TypeError):
        as_rows("rows.jsonl")
    from PIL import Image

    with pytest.raises(TypeError, match="decode=False"):
        as_rows([{"image": Image.new("RGB", (4, 4)), "text": "x"}])


def test_import_stays_light():
    code = "import sys, vlmlint; vlmlint.check_batch; print(sorted(m for m in ('transformers', 'pandas', 'pyarrow') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
