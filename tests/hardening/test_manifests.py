"""Hostile and broken manifest files: each ends in a finding on its row or one clear line (exit 2).

Cases that could hang or exhaust memory are read in a subprocess under a time and address-space limit
(`read_isolated`); the others in this process under `time_limit`.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hardening.conftest import FUZZ, problem_codes, read_isolated, run_cli, shape, time_limit
from vlmlint.readers import DatasetError, iter_samples

GOOD = {"id": "good", "image": "a.jpg", "text": "a cat"}
GOOD_LINE = json.dumps(GOOD).encode()


def read(path) -> tuple[list, str | None]:
    """(line, id, [(code, message)]) per sample, and the DatasetError message if the file is refused."""
    rows = []
    with time_limit(20, f"reading {path.name}"):
        try:
            for sample in iter_samples(str(path)):
                rows.append((sample.line, sample.id, [(p.code, p.message) for p in sample.problems]))
        except DatasetError as exc:
            return rows, str(exc)
    return rows, None


def first_problem(rows) -> str:
    return next(f'{code} "{message}"' for _, _, problems in rows for code, message in problems)


# -- fuzzing ------------------------------------------------------------------------------------------


@FUZZ
@given(lines=st.lists(st.binary(max_size=200), max_size=8))
def test_random_bytes_as_jsonl(tmp_path_factory, lines, record):
    path = tmp_path_factory.mktemp("fuzz") / "data.jsonl"
    path.write_bytes(b"\n".join(lines))
    rows, error = read(path)
    if error is not None:  # only a UTF-16/32 byte-order mark refuses the whole file
        assert path.read_bytes()[:2] in (b"\xff\xfe", b"\xfe\xff", b"\x00\x00"), error
    for _, _, problems in rows:
        assert all(code in ("VLM101", "VLM102") for code, _ in problems)
    record(
        "manifests",
        "random bytes as JSON Lines (hypothesis, 120 files)",
        "each line that is not a JSON object is a VLM101 (or VLM102) finding on that line, the others "
        "are read; no exception, no hang",
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@FUZZ
@given(items=st.lists(json_values, max_size=6), as_array=st.booleans())
def test_random_json_values_as_rows(tmp_path_factory, items, as_array, record):
    folder = tmp_path_factory.mktemp("fuzz")
    if as_array:
        path = folder / "data.json"
        path.write_text(json.dumps(items))
    else:
        path = folder / "data.jsonl"
        path.write_text("".join(json.dumps(item) + "\n" for item in items))
    rows, error = read(path)
    assert error is None
    assert len(rows) == len(items)
    record(
        "manifests",
        "random JSON values as rows, JSONL and JSON array (hypothesis, 120 files)",
        "one sample per value: a row, or a VLM101/VLM102 finding; no exception",
    )


# -- nesting, size ------------------------------------------------------------------------------------


def test_deeply_nested_jsonl_line(tmp_path, record):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n" + GOOD_LINE + b"\n")
    result = read_isolated(path)
    assert [(line, codes) for line, _, codes in result.rows][1] == (2, [])
    assert result.rows[0][2][0][0] == "VLM101" and "depth" in result.rows[0][2][0][1]
    record(
        "manifests",
        "JSON Lines line of 100,000 nested arrays",
        f"{first_problem(result.rows)}; the next line is read",
    )


def test_deeply_nested_json_array(tmp_path, record):
    path = tmp_path / "data.json"
    path.write_bytes(b"[" + GOOD_LINE + b", " + b"[" * 100_000 + b"]" * 100_000 + b"]")
    result = read_isolated(path, timeout=30)
    assert result.rows[0][1] == "good" and not result.rows[0][2]
    assert problem_codes(result.rows[1:]) == ["VLM101"]
    assert result.peak_mb < 500, result.peak_mb  # ijson alone would need gigabytes
    record(
        "manifests",
        "JSON array whose 2nd element nests 100,000 arrays",
        f"the 1st row is read; {first_problem(result.rows)}",
    )


def test_row_nested_1000_levels_within_the_limit(tmp_path, record):
    deep = b"[" * 1000 + b"]" * 1000
    jsonl, array = tmp_path / "data.jsonl", tmp_path / "data.json"
    jsonl.write_bytes(b'{"id": "deep", "image": "a.jpg", "text": "x", "extra": ' + deep + b"}\n")
    array.write_bytes(b'[{"id": "deep", "image": "a.jpg", "text": "x", "extra": ' + deep + b"}]")
    for path in (jsonl, array):
        rows, error = read(path)
        assert error is None and rows == [(1, "deep", [])]
    record(
        "manifests",
        "row holding a value nested 1,000 levels deep (below the limit), JSONL and JSON array",
        "read as a row (fingerprint and messages without RecursionError)",
    )


def test_100_mb_jsonl_line(tmp_path, record):
    path = tmp_path / "data.jsonl"
    with open(path, "wb") as handle:
        handle.write(b'{"id": "big", "image": "a.jpg", "text": "' + b"x" * (100 * 2**20) + b'"}\n')
        handle.write(GOOD_LINE + b"\n")
    result = read_isolated(path)
    assert result.rows[0][2][0][0] == "VLM101" and "longer than 64 MiB" in result.rows[0][2][0][1]
    assert result.rows[1][:2] == [2, "good"]
    assert result.peak_mb < 400, result.peak_mb
    record(
        "manifests",
        "100 MB single JSON Lines line",
        f"{first_problem(result.rows)}; the next line is read; peak memory below 400 MB",
    )


def test_100_mb_file_without_a_newline(tmp_path, record):
    path = tmp_path / "data.jsonl"
    with open(path, "wb") as handle:
        handle.write(b"x" * (100 * 2**20))
    result = read_isolated(path)
    assert problem_codes(result.rows) == ["VLM101"] and len(result.rows) == 1
    assert result.peak_mb < 400, result.peak_mb
    record(
        "manifests",
        "100 MB of bytes without a newline",
        "one VLM101 (line longer than 64 MiB, not parsed); peak memory below 400 MB",
    )


@pytest.mark.parametrize(
    "case,element",
    [
        ("100 MB string", b'{"id": "big", "image": "a.jpg", "text": "' + b"x" * (100 * 2**20) + b'"}'),
        ("100 MB list of numbers", b'{"id": "big", "text": [' + b"1," * (50 * 2**20) + b"1]}"),
    ],
)
def test_huge_json_array_element(tmp_path, case, element, record):
    path = tmp_path / "data.json"
    with open(path, "wb") as handle:
        handle.write(b"[" + GOOD_LINE + b", " + element + b", " + GOOD_LINE + b"]")
    result = read_isolated(path, timeout=30)
    assert result.rows[0][1] == "good"
    assert problem_codes(result.rows[1:]) == ["VLM101"]
    assert result.peak_mb < 500, result.peak_mb
    record(
        "manifests",
        f"JSON array element holding a {case}",
        f"the rows before it are read; {first_problem(result.rows)}; within seconds, peak memory "
        "below 500 MB",
    )


# -- encodings, line endings, numbers -------------------------------------------------------------------


def test_invalid_utf8(tmp_path, record):
    jsonl, array = tmp_path / "data.jsonl", tmp_path / "data.json"
    bad = b'{"id": "bad", "image": "a\xff\xfe.jpg", "text": "x"}'
    jsonl.write_bytes(bad + b"\n" + GOOD_LINE + b"\n")
    array.write_bytes(b"[" + GOOD_LINE + b", " + bad + b"]")
    rows, _ = read(jsonl)
    assert rows[0][2][0][0] == "VLM101" and rows[1][1] == "good"
    record("manifests", "invalid UTF-8 inside a JSONL line", f"{first_problem(rows)}; the next line is read")
    rows, _ = read(array)
    assert rows[0][1] == "good" and rows[1][2][0][0] == "VLM101"
    record(
        "manifests", "invalid UTF-8 inside a JSON array", f"rows before it are read; {first_problem(rows)}"
    )


@pytest.mark.parametrize(
    "encoding,mark", [("UTF-16 LE", "utf-16-le"), ("UTF-16 BE", "utf-16-be"), ("UTF-32 LE", "utf-32-le")]
)
def test_utf16_and_utf32_files(tmp_path, encoding, mark, record):
    text = "\ufeff" + json.dumps(GOOD) + "\n"
    for name in ("data.jsonl", "data.json"):
        path = tmp_path / name
        path.write_bytes(text.encode(mark))
        rows, error = read(path)
        assert rows == [] and error is not None and "UTF-8" in error
    record(
        "manifests",
        f"{encoding} manifest with a byte-order mark (.jsonl and .json)",
        f"exit 2: {shape(error, tmp_path)}",
    )


def test_utf8_bom_and_crlf(tmp_path, record):
    jsonl, array = tmp_path / "data.jsonl", tmp_path / "data.json"
    jsonl.write_bytes(b"\xef\xbb\xbf" + GOOD_LINE + b"\r\n" + GOOD_LINE.replace(b"good", b"two") + b"\r\n")
    array.write_bytes(
        b"\xef\xbb\xbf[\r\n" + GOOD_LINE + b",\r\n" + GOOD_LINE.replace(b"good", b"two") + b"\r\n]"
    )
    for path in (jsonl, array):
        rows, error = read(path)
        assert error is None and [(r[1], r[2]) for r in rows] == [("good", []), ("two", [])]
    record(
        "manifests",
        "UTF-8 byte-order mark and CRLF line ends (.jsonl and .json)",
        "read like plain UTF-8 with LF",
    )


@pytest.mark.parametrize(
    "case,value",
    [
        ("NaN", b"NaN"),
        ("Infinity", b"Infinity"),
        ("-Infinity", b"-Infinity"),
        ("10**400", b"1" + b"0" * 400),
        ("1e999", b"1e999"),
        ("2**70", str(2**70).encode()),
    ],
)
def test_non_finite_and_huge_numbers(tmp_path, case, value, record):
    line = b'{"id": ' + value + b', "image": "a.jpg", "text": "x"}'
    jsonl, array = tmp_path / "data.jsonl", tmp_path / "data.json"
    jsonl.write_bytes(line + b"\n" + GOOD_LINE + b"\n")
    array.write_bytes(b"[" + GOOD_LINE + b", " + line + b", " + GOOD_LINE + b"]")
    outcomes = []
    for path, kind in ((jsonl, "JSONL"), (array, "JSON array")):
        rows, error = read(path)
        assert error is None
        problems = [p for _, _, ps in rows for p in ps]
        if problems:
            outcomes.append(f'{kind}: {problems[0][0]} "{problems[0][1]}"')
        else:
            number = next(r[1] for r in rows if r[1] != "good")
            how = " (a float: orjson reads integers beyond 64 bits so)" if kind == "JSONL" else " (an int)"
            outcomes.append(f"{kind}: read, id {number}{how}")
    record("manifests", f"{case} as a number in a row", "; ".join(outcomes))


def test_nul_bytes_and_blank_lines(tmp_path, record):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"\n\n   \n\x00\x00\x00\n" + GOOD_LINE + b"\n\t\n")
    rows, error = read(path)
    assert error is None and [(r[0], r[2][0][0] if r[2] else None) for r in rows] == [
        (4, "VLM101"),
        (5, None),
    ]
    record("manifests", "NUL bytes and blank lines in JSONL", "blank lines skipped; the NUL line is VLM101")


def test_truncated_json_array(tmp_path, record):
    path = tmp_path / "data.json"
    text = json.dumps([GOOD, {**GOOD, "id": "two"}, {**GOOD, "id": "three"}])
    path.write_text(text[: len(text) - 25])
    rows, error = read(path)
    assert error is None and [r[1] for r in rows[:2]] == ["good", "two"]
    assert rows[2][2][0][0] == "VLM101"
    record(
        "manifests",
        "JSON array cut off in its last element",
        f"the complete rows are read; {first_problem(rows[2:])}",
    )


def test_empty_files(tmp_path, record):
    for name in ("data.jsonl", "data.json"):
        (tmp_path / name).write_bytes(b"")
        rows, error = read(tmp_path / name)
        assert rows == [] and error is None
    record("manifests", "empty .jsonl and .json files", "no rows (exit 0 unless other files have findings)")


def test_pretty_printed_single_object(tmp_path, record):
    path = tmp_path / "data.json"
    path.write_text(json.dumps(GOOD, indent=2))
    rows, error = read(path)
    assert error is None and problem_codes(rows) == ["VLM101"] and len(rows) == 5
    record(
        "manifests",
        "a .json file holding one pretty-printed object (not an array)",
        "read as JSON Lines: each of its lines is a VLM101 finding",
    )


# -- tables and folders ---------------------------------------------------------------------------------


def test_corrupt_tables_exit_2_with_one_line(tmp_path, record):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + os.urandom(64) + b"PAR1")
    (tmp_path / "bad.arrow").write_bytes(b"ARROW1\x00\x00" + b"\x00" * 64)
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "state.json").write_text("{not json")
    good = tmp_path / "good.jsonl"
    good.write_bytes(GOOD_LINE + b"\n")
    targets = [tmp_path / "bad.parquet", tmp_path / "bad.arrow", saved]
    run = run_cli(
        "scan", str(good), *map(str, targets), "-q", "--verify", "0", "--jobs", "1", "--format", "json"
    )
    assert run.exit_code == 2
    assert run.report["summary"]["samples"] == 1  # the readable dataset is still reported
    skipped = [line for line in run.stderr.splitlines() if line.startswith("vlmlint: skipped:")]
    assert len(skipped) == 3
    for target, line in zip(targets, skipped, strict=True):
        assert str(target) in line
        message = line.replace(str(target), "<file>").removeprefix("vlmlint: skipped: ")
        message = message.split(": ", 2)  # the reader's exception text varies with pyarrow's version
        record(
            "manifests",
            f"corrupt {target.name if target != saved else 'save_to_disk folder'}",
            f"exit 2: {message[0]}: {message[1]}: ... (the other datasets are reported)",
        )


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_invalid_utf8_in_a_table_costs_its_row_only(tmp_path, record, jobs):
    """A string value Arrow cannot decode (invalid UTF-8 written as string) is VLM101 on its row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [GOOD] * 600  # three record batches; the bad rows sit in the second and third
    table = pa.Table.from_pylist([{**row, "id": f"r{i}"} for i, row in enumerate(rows)])
    ids = [f"r{i}".encode() for i in range(len(rows))]
    ids[300], ids[599] = b"\xff\xfe", b"ok\xc3"
    raw = pa.array(ids, type=pa.binary())
    broken = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())  # no UTF-8 check
    pq.write_table(table.set_column(table.schema.get_field_index("id"), "id", broken), tmp_path / "t.parquet")
    run = run_cli(
        "scan", str(tmp_path / "t.parquet"), "-q", "--verify", "0", "--jobs", jobs, "--format", "json"
    )
    assert run.exit_code == 1, run.stderr
    assert run.report["summary"]["samples"] == 600
    bad = [f for f in run.report["findings"] if f["code"] == "VLM101"]
    assert [f["index"] for f in bad] == [300, 599]
    assert "UnicodeDecodeError" in bad[0]["message"]
    record(
        "manifests",
        "a parquet string value that is not UTF-8",
        "VLM101 on that row (row cannot be read from the table); the other rows of its batch are scanned",
    )


def test_fifo_named_like_a_manifest_does_not_block(tmp_path, record):
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "data.jsonl").write_bytes(GOOD_LINE + b"\n")
    os.mkfifo(folder / "more.jsonl")
    os.mkfifo(tmp_path / "alone.jsonl")
    result = read_isolated(folder, timeout=20)
    assert [row[1] for row in result.rows] == ["good"]
    record(
        "manifests",
        "a FIFO named more.jsonl in a scanned folder",
        "skipped (only regular files are opened); no hang",
    )
    result = read_isolated(tmp_path / "alone.jsonl", timeout=20)
    assert result.rows == [] and "not a regular file" in result.error
    record("manifests", "a FIFO given as the dataset", f"exit 2: {shape(result.error, tmp_path)}")


def test_truncated_tar_shard(tmp_path, record):
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for key in range(3):
            for ext, payload in (("jpg", os.urandom(3000)), ("txt", b"a caption")):
                info = tarfile.TarInfo(f"{key:06d}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    data = buffer.getvalue()
    path = tmp_path / "shard-000.tar"
    path.write_bytes(data[: len(data) // 2])
    rows, error = read(path)
    assert error is None and rows and problem_codes(rows) == ["VLM101"]
    record(
        "manifests",
        "WebDataset tar shard cut in half",
        "the complete samples are read; the cut is a VLM101 finding",
    )


def test_a_20_mb_conversation_is_reported_not_tokenized(tmp_path, record):
    """Tokenizers need ~0.3 GB per MB of text: such a row is VLM408 (max_text_chars), in bounded time."""
    from PIL import Image

    Image.new("RGB", (64, 64)).save(tmp_path / "a.jpg")
    huge = {"id": "huge", "image": "a.jpg", "conversations": [
        {"from": "human", "value": "<image>\nSummarise."}, {"from": "gpt", "value": "log line\n" * 2_300_000}]}  # fmt: skip
    (tmp_path / "data.jsonl").write_text(json.dumps(huge) + "\n" + GOOD_LINE.decode() + "\n")
    result = run_cli("scan", str(tmp_path / "data.jsonl"), "--verify", "0", "-q", "-f", "json", timeout=60)
    codes = [(f["id"], f["code"]) for f in result.report["findings"]]
    assert ("huge", "VLM408") in codes, codes
    assert result.report["summary"]["samples"] == 2
    record(
        "manifests",
        "a 20 MB conversation (one JSON Lines row)",
        "VLM408 oversized-text: not tokenized (above max_text_chars, 1,000,000 characters); the scan goes on",
    )
