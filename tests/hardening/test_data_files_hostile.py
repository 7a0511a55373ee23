"""Data files a dataset names (dataset_info.json, state.json), and tables and CSV built to exhaust memory.

The root rule of images holds for every file vlmlint opens because of the dataset's content: a
file_name or a _data_files entry that leaves the dataset folder is refused before anything there is
opened or listed. Tables meet bounds read from their metadata and their Arrow buffers before any row
becomes Python values. Every case runs guarded (tests/hardening/conftest.py): opens, listings and
program starts audited, peak memory measured.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.hardening.conftest import MODEL, read_isolated, run_guarded, shape

GOOD = {"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
SCAN = ("--model", MODEL, "-q", "--verify", "0", "--jobs", "1", "--format", "json")


def _layout(tmp_path):
    dataset, outside = tmp_path / "dataset", tmp_path / "outside"
    dataset.mkdir()
    outside.mkdir()
    (outside / "part.jsonl").write_text(json.dumps(GOOD) + "\n")
    return dataset, outside


def _info(dataset, file_name):
    entry = {"file_name": file_name, "formatting": "sharegpt", "columns": {"messages": "conversations"}}
    (dataset / "dataset_info.json").write_text(json.dumps({"demo": entry}))


def _nothing_outside(run, outside):
    assert run.touched(outside) == []
    assert not [path for path in run.listed if path == "/etc" or path.startswith("/etc/")]
    assert run.peak_mb < 1024


# -- paths: data files named by the dataset --------------------------------------------------------------


@pytest.mark.parametrize(
    "case, file_name",
    [
        ("absolute", "{outside}/part.jsonl"),
        ("climbing", "../outside/part.jsonl"),
        ("a folder outside", "{outside}"),
        ("/etc", "/etc"),
    ],
)
def test_llamafactory_file_name_outside_the_folder(tmp_path, case, file_name, record):
    dataset, outside = _layout(tmp_path)
    _info(dataset, file_name.format(outside=outside))
    run = run_guarded("scan", str(dataset), "--dataset", "demo", *SCAN)
    _nothing_outside(run, outside)
    assert run.exit_code == 2
    line = run.error_line(tmp_path)
    assert "dataset_info.json: file_name" in line and "outside the data folder: not read" in line
    record(
        "paths",
        f"LLaMA-Factory dataset_info.json file_name {case} ({file_name.replace('{outside}', '<outside>')})",
        "exit 2, one line naming dataset_info.json, the file_name and where it leads (outside the data "
        "folder: not read); nothing there opened or listed",
    )


def test_llamafactory_file_name_symlinked_out(tmp_path, record):
    dataset, outside = _layout(tmp_path)
    (dataset / "data").mkdir()
    (dataset / "data" / "part.jsonl").symlink_to(outside / "part.jsonl")
    (dataset / "link").symlink_to(outside)
    for file_name in ("data", "link"):
        _info(dataset, file_name)
        run = run_guarded("scan", str(dataset), "--dataset", "demo", *SCAN)
        _nothing_outside(run, outside)
        assert run.exit_code == 2 and "outside the data folder: not read" in run.error_line(tmp_path)
    allowed = run_guarded("scan", str(dataset), "--dataset", "demo", "--allow-outside-root", *SCAN)
    assert allowed.exit_code == 0 and allowed.report["summary"]["samples"] == 1
    record(
        "paths",
        "LLaMA-Factory file_name a folder holding a symlink out, or a symlink to a folder out",
        "exit 2, one line naming the file and file_name (a symlink outside the data folder: not read); "
        "read with --allow-outside-root",
    )


def test_dataset_info_json_symlinked_out(tmp_path, record):
    dataset, outside = _layout(tmp_path)
    (outside / "dataset_info.json").write_text(json.dumps({"demo": {"file_name": "part.jsonl"}}))
    (dataset / "dataset_info.json").symlink_to(outside / "dataset_info.json")
    run = run_guarded("scan", str(dataset), "--dataset", "demo", *SCAN)
    _nothing_outside(run, outside)
    assert run.exit_code == 2
    record(
        "paths",
        "dataset_info.json itself a symlink out of the data folder",
        shape(run.error_line(tmp_path), tmp_path),
    )


def _saved(dataset, rows=(GOOD,)):
    import datasets

    datasets.Dataset.from_list(list(rows)).save_to_disk(str(dataset))


@pytest.mark.parametrize("case", ["absolute", "climbing"])
def test_save_to_disk_state_names_a_file_outside(tmp_path, case, record):
    dataset, outside = _layout(tmp_path)
    _saved(outside / "other")
    _saved(dataset / "saved")
    state_path = dataset / "saved" / "state.json"
    state = json.loads(state_path.read_text())
    target = outside / "other" / state["_data_files"][0]["filename"]
    name = str(target) if case == "absolute" else os.path.relpath(target, dataset / "saved")
    state["_data_files"] = [{"filename": name}]
    state_path.write_text(json.dumps(state))
    run = run_guarded("scan", str(dataset / "saved"), *SCAN)
    _nothing_outside(run, outside)
    assert run.exit_code == 2
    line = run.error_line(tmp_path)
    assert "state.json: _data_files entry" in line and "outside the dataset folder" in line
    record(
        "paths",
        f"save_to_disk state.json naming an arrow file by {'an absolute' if case == 'absolute' else 'a ../'} path",
        "exit 2, one line naming state.json, the _data_files entry and where it leads (outside the dataset "
        "folder: not read); nothing there opened",
    )


def test_save_to_disk_split_and_symlink_out(tmp_path, record):
    dataset, outside = _layout(tmp_path)
    _saved(outside / "train")
    (dataset / "saved").mkdir()
    (dataset / "saved" / "dataset_dict.json").write_text(json.dumps({"splits": ["../../outside/train"]}))
    run = run_guarded("scan", str(dataset / "saved"), *SCAN)
    _nothing_outside(run, outside)
    assert run.exit_code == 2 and "outside the dataset folder" in run.error_line(tmp_path)
    _saved(dataset / "linked")
    state = json.loads((dataset / "linked" / "state.json").read_text())
    arrow = dataset / "linked" / state["_data_files"][0]["filename"]
    arrow.unlink()
    arrow.symlink_to(next((outside / "train").glob("*.arrow")))
    run = run_guarded("scan", str(dataset / "linked"), *SCAN)
    _nothing_outside(run, outside)
    assert run.exit_code == 2 and "outside the dataset folder" in run.error_line(tmp_path)
    record(
        "paths",
        "save_to_disk dataset_dict.json split ../ out, and an arrow file that is a symlink out",
        "exit 2, one line naming the file and entry (outside the dataset folder: not read); nothing there opened",
    )


# -- dataset_info.json: nesting and size ------------------------------------------------------------------


def test_deeply_nested_and_huge_dataset_info(tmp_path, record):
    dataset, outside = _layout(tmp_path)
    (dataset / "dataset_info.json").write_text('{"demo": ' + "[" * 100_000 + "]" * 100_000 + "}")
    run = run_guarded("scan", str(dataset), "--dataset", "demo", *SCAN)
    _nothing_outside(run, outside)
    assert run.exit_code == 2 and "not readable JSON" in run.error_line(tmp_path)
    nested = shape(run.error_line(tmp_path), tmp_path)
    with open(dataset / "dataset_info.json", "wb") as handle:
        handle.truncate(2**30)  # sparse: 1 GiB of NUL bytes
    run = run_guarded("scan", str(dataset), "--dataset", "demo", *SCAN)
    _nothing_outside(run, outside)
    assert run.exit_code == 2 and "larger than 16 MiB" in run.error_line(tmp_path)
    record("manifests", "dataset_info.json nested 100,000 levels", f"exit 2: {nested}")
    record(
        "bounds", "a 1 GiB dataset_info.json (sparse)", "exit 2: " + shape(run.error_line(tmp_path), tmp_path)
    )


# -- bounds: parquet and arrow built to exhaust memory ----------------------------------------------------


def _row(text, i=0, row_id=None):
    return {
        "id": row_id or f"r{i}",
        "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "ok"}],
    }


def _findings(run):
    return {finding["index"]: finding for finding in run.report["findings"] if finding["code"] == "VLM101"}


def test_parquet_one_huge_value(tmp_path, record):
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    rows = [_row("x" * 200 * 2**20, 1)] + [_row("hi", i) for i in range(2, 50)]
    table = pa.Table.from_pylist(rows)
    del rows
    pq.write_table(table, dataset / "t.parquet", compression="zstd")
    del table
    assert (dataset / "t.parquet").stat().st_size < 200_000
    run = run_guarded("scan", str(dataset), *SCAN, timeout=300)
    assert run.peak_mb < 1024, run.peak_mb
    assert run.report["summary"]["samples"] == 49
    bad = _findings(run)
    assert sorted(bad) == list(range(49)) and "bound a page" in bad[0]["message"]
    record(
        "bounds",
        "parquet with one 200 MB value among 48 small rows (zstd, a few KB)",
        f"VLM101 on each row of its row group, the page never decoded: {shape(bad[0]['message'])}; "
        "peak memory below 1 GiB",
    )


def test_parquet_row_group_of_huge_flagged_rows(tmp_path, record):
    """A row group whose metadata declares 600 MB for 2 rows (6 columns, each one 100 MB dictionary value)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    value = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(["y" * 100 * 2**20]))
    columns = {"id": ["r0", "r1"], "image": ["a.jpg"] * 2, "text": ["hi"] * 2}
    columns.update({f"c{i}": value for i in range(6)})  # the same buffers: 100 MB in memory to write
    pq.write_table(
        pa.table(columns), dataset / "t.parquet", compression="zstd", dictionary_pagesize_limit=2**30
    )
    del columns, value
    assert (dataset / "t.parquet").stat().st_size < 2 * 2**20
    (dataset / "good.jsonl").write_text(json.dumps(GOOD) + "\n")
    run = run_guarded("scan", str(dataset), *SCAN, timeout=300)
    assert run.peak_mb < 1024, run.peak_mb
    findings = [f for f in run.report["findings"] if f["code"] == "VLM101"]
    assert len(findings) == 2 and "bound a row" in findings[0]["message"], findings
    assert run.report["summary"]["samples"] == 3
    record(
        "bounds",
        "parquet row group declaring 600 MB uncompressed for 2 rows (a few KB of zstd)",
        f"VLM101 on each of its rows, not decoded: {shape(findings[0]['message'])}; peak memory below 1 GiB",
    )


def test_parquet_dictionary_of_huge_values(tmp_path, record):
    """24 rows naming one 50 MB dictionary value: 1.2 GB once decoded, a few KB of file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    value = pa.DictionaryArray.from_arrays(pa.array([0] * 24, pa.int32()), pa.array(["y" * 50 * 2**20]))
    table = pa.table({"id": [f"r{i}" for i in range(24)], "image": ["a.jpg"] * 24, "text": value})
    pq.write_table(table, dataset / "t.parquet", compression="zstd", dictionary_pagesize_limit=2**30)
    del table, value
    assert (dataset / "t.parquet").stat().st_size < 2**20
    result = read_isolated(dataset / "t.parquet", timeout=120)
    assert result.peak_mb < 1024, result.peak_mb
    assert len(result.rows) == 24 and not any(problems for _, _, problems in result.rows)
    record(
        "bounds",
        "parquet of 24 rows naming one 50 MB dictionary value (1.2 GB decoded, a few KB of zstd)",
        "read as a dictionary (the value once in memory), turned into Python values in slices within the "
        "256 MiB bound a batch; every row read; peak memory below 1 GiB",
    )


def _dictionary_bomb(rows, size):
    """One `size`-byte string stored once, referenced by every row: a few KB of file."""
    import pyarrow as pa

    value = pa.array(["z" * size])
    return pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), value)


def test_arrow_dictionary_bomb(tmp_path, record):
    """An Arrow IPC file whose dictionary holds one 1 MB value for 4,000 rows: 4 GB as Python strings."""
    import pyarrow as pa

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    text = _dictionary_bomb(2000, 2**20)
    ids = pa.array([f"r{i}" for i in range(2000)])
    batch = pa.record_batch({"id": ids, "image": pa.array(["a.jpg"] * 2000), "text": text})
    with pa.OSFile(str(dataset / "t.arrow"), "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    assert (dataset / "t.arrow").stat().st_size < 2 * 2**20
    result = read_isolated(dataset / "t.arrow", timeout=120)
    assert result.peak_mb < 1024, result.peak_mb
    assert len(result.rows) == 2000 and not any(problems for _, _, problems in result.rows)
    record(
        "bounds",
        "Arrow IPC file: one 1 MB dictionary value for 2,000 rows (2 GB as Python strings)",
        "the readers turn it into Python values in slices within the 256 MiB bound a batch; every row read; "
        "peak memory of the reading below 1 GiB",
    )


def test_parquet_dictionary_bomb_of_long_ids(tmp_path, record):
    """Long duplicate ids decompressed from a tiny parquet file: the id is cut to 1,024 characters."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    ids = _dictionary_bomb(2000, 2**19)
    table = pa.table({"id": ids, "image": ["a.jpg"] * 2000, "text": ["hi"] * 2000})
    pq.write_table(table, dataset / "t.parquet", compression="zstd")
    assert (dataset / "t.parquet").stat().st_size < 200_000
    run = run_guarded("scan", str(dataset), *SCAN, timeout=300)
    assert run.peak_mb < 1024, run.peak_mb
    assert len(run.stdout) < 200 * 2**20
    assert "...[524,288 characters]" in run.stdout
    assert run.report["summary"]["samples"] == 2000
    record(
        "bounds",
        "parquet of 2,000 duplicate 512 KB ids (a few KB of zstd)",
        "ids cut to 1,024 characters with a marker (MAX_ID_CHARS): the report stays small; peak memory below 1 GiB",
    )


def test_parquet_temporal_out_of_range(tmp_path, record):
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    table = pa.table(
        {
            "id": ["r0", "r1", "r2"],
            "image": ["a.jpg"] * 3,
            "text": ["hi"] * 3,
            "when": pa.array([0, 2**62, 5], pa.date64()),
            "took": pa.array([0, 1, 2**62], pa.duration("s")),
        }
    )
    pq.write_table(table, dataset / "t.parquet")
    run = run_guarded("scan", str(dataset), *SCAN)
    assert run.report["summary"]["samples"] == 3
    bad = _findings(run)
    assert sorted(bad) == [1, 2], bad
    record(
        "manifests",
        "parquet date64 and duration values out of Python's range",
        f"VLM101 on those rows ({shape(bad[1]['message'].split(':')[0])}...); the other rows are scanned",
    )


def test_arrow_offsets_past_the_buffer(tmp_path, record):
    """A hostile IPC file whose string offsets point past its data buffer: the row is not read."""
    import numpy as np
    import pyarrow as pa

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    good = pa.array(["hi", "hi", "hi"])
    offsets = pa.py_buffer(np.array([0, 2, 10**8, 6], dtype=np.int32).tobytes())
    broken = pa.Array.from_buffers(pa.string(), 3, [None, offsets, good.buffers()[2]])
    batch = pa.record_batch({"id": ["r0", "r1", "r2"], "image": ["a.jpg"] * 3, "text": broken})
    with pa.OSFile(str(dataset / "t.arrow"), "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    run = run_guarded("scan", str(dataset), *SCAN)
    assert run.report["summary"]["samples"] == 3
    bad = _findings(run)
    assert 1 in bad and "ArrowInvalid" in bad[1]["message"]
    record(
        "manifests",
        "Arrow IPC string offsets pointing past the data buffer",
        "VLM101 on the rows Arrow's full validation rejects (row cannot be read from the table: ArrowInvalid); "
        "the others are scanned",
    )


def test_parquet_value_between_the_value_and_page_bounds(tmp_path, record):
    """A 100 MB value in a row group of many small rows: decoded (below the page bound), its row refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    texts = ["w" * 100 * 2**20] + ["hi"] * 999
    table = pa.table({"id": [f"r{i}" for i in range(1000)], "image": ["a.jpg"] * 1000, "text": texts})
    del texts
    pq.write_table(table, dataset / "t.parquet", compression="zstd")
    del table
    result = read_isolated(dataset / "t.parquet", timeout=120)
    assert result.peak_mb < 1024, result.peak_mb
    assert len(result.rows) == 1000
    bad = [(position, problems) for position, (_, _, problems) in enumerate(result.rows) if problems]
    assert len(bad) == 1 and bad[0][0] == 0 and "bound 64 MiB a value" in bad[0][1][0][1], bad
    record(
        "bounds",
        "parquet value of 100 MB (zstd) among 999 small rows",
        f"VLM101 on that row only: {shape(bad[0][1][0][1])}; the other rows are read; peak memory below 1 GiB",
    )


@pytest.mark.parametrize("form", ["stream", "file"])
def test_compressed_arrow_bomb(tmp_path, form, record):
    """A zstd Arrow IPC batch declaring 300 MB decompressed: refused from its message, nothing decompressed."""
    import pyarrow as pa

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    batch = pa.record_batch({"id": [f"r{i}" for i in range(6)], "text": ["z" * 50 * 2**20] * 6})
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    new = pa.ipc.new_stream if form == "stream" else pa.ipc.new_file
    with (
        pa.OSFile(str(dataset / "t.arrow"), "wb") as sink,
        new(sink, batch.schema, options=options) as writer,
    ):
        writer.write_batch(batch)
    del batch
    assert (dataset / "t.arrow").stat().st_size < 200_000
    (dataset / "good.jsonl").write_text(json.dumps(GOOD) + "\n")
    run = run_guarded("scan", str(dataset / "good.jsonl"), str(dataset / "t.arrow"), *SCAN, timeout=300)
    assert run.peak_mb < 1024, run.peak_mb
    assert run.exit_code == 2 and run.report["summary"]["samples"] == 1
    line = next(text for text in run.stderr.splitlines() if "skipped:" in text).replace(
        str(tmp_path), "<tmp>"
    )
    assert "bytes once decompressed, beyond the 256 MiB bound a batch" in line, line
    record(
        "bounds",
        f"Arrow IPC {form} file, one zstd batch declaring 300 MB decompressed (a few KB)",
        "exit 2, one line: "
        + shape(line, tmp_path).removeprefix("vlmlint: skipped: ")
        + " (the other datasets "
        "are reported); peak memory below 1 GiB",
    )
