"""Rows huge in count: images, placeholders, parts and turns per row, repeated ids, retained bytes.

Each case scans a dataset built here (a few MB at most, except the data: URI case) with the CLI in a
guarded subprocess: exit 0/1/2, no traceback, no program started, nothing outside the dataset
opened, peak memory under 1 GiB, bounded time. Beyond a per-row bound (sample.MAX_*_PER_ROW) the row
is one VLM101 finding and is not counted image by image; the scan goes on with the next row.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from PIL import Image

from tests.hardening.conftest import MODEL, run_guarded, shape
from vlmlint.engine import KEEP_EMBEDDED_BYTES
from vlmlint.records import MAX_FRAMES_PER_ROW, MAX_IMAGES_PER_ROW, MAX_MEDIA_PER_ROW, MAX_PARTS_PER_ROW
from vlmlint.rules.base import MAX_MESSAGE_CHARS
from vlmlint.rules.rows import MAX_DUPLICATE_FINDINGS

NORMAL = {"messages": [{"role": "user", "content": "<image>hi"}, {"role": "assistant", "content": "ok"}]}


def _png(path: Path, side: int = 64) -> None:
    Image.new("RGB", (side, side), "red").save(path)  # above min_pixels: no tiny-image finding


def _layout(tmp: Path, rows: list[dict | str], normal: dict | None = None) -> tuple[Path, Path]:
    """tmp/dataset (a.png, data.jsonl with `rows` then one normal row) and tmp/outside (b.png)."""
    dataset, outside = tmp / "dataset", tmp / "outside"
    dataset.mkdir()
    outside.mkdir()
    _png(dataset / "a.png")
    _png(outside / "b.png")
    with open(dataset / "data.jsonl", "w", encoding="utf-8") as out:
        for row in [*rows, normal or {**NORMAL, "id": "normal", "images": ["a.png"]}]:
            out.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return dataset, outside


def _scan(dataset: Path, *extra: str, timeout: float = 120, source: str = "data.jsonl"):
    return run_guarded(
        "scan", source, "-m", MODEL, "-f", "json", "-q", "--verify", "0", *extra, timeout=timeout, cwd=dataset
    )


def _checked(run, outside: Path | None = None) -> dict:
    if outside is not None:
        assert run.touched(outside) == []
    assert run.peak_mb < 1024, run.peak_mb
    return run.report


def _row_findings(report: dict, line: int) -> list[dict]:
    return [f for f in report["findings"] if f["line"] == line]


def _refused(report: dict, line: int = 1) -> str:
    """The one VLM101 message on `line`; the normal row after it is scanned without a finding."""
    findings = _row_findings(report, line)
    assert [f["code"] for f in findings] == ["VLM101"], findings
    assert report["summary"]["samples"] == line + 1
    assert _row_findings(report, line + 1) == []
    return findings[0]["message"]


def _timed(dataset: Path, *extra: str, limit: float, **kwargs):
    start = time.monotonic()
    run = _scan(dataset, *extra, **kwargs)
    elapsed = time.monotonic() - start
    assert elapsed < limit, f"{elapsed:.1f} s"
    return run


def test_bounds_are_what_the_docs_say():
    assert (MAX_IMAGES_PER_ROW, MAX_MEDIA_PER_ROW, MAX_FRAMES_PER_ROW, MAX_PARTS_PER_ROW) == (
        1_024,
        1_024,
        8_192,
        10_000,
    )
    assert (MAX_DUPLICATE_FINDINGS, MAX_MESSAGE_CHARS, KEEP_EMBEDDED_BYTES) == (1_000, 2_000, 64 * 2**20)


def _sharegpt(images: list[str], placeholders: int) -> dict:
    return {
        "id": "big",
        "messages": [
            {"role": "user", "content": "<image>" * placeholders + "Compare them."},
            {"role": "assistant", "content": "ok"},
        ],
        "images": images,
    }


@pytest.mark.parametrize(
    "case, images",
    [
        ("a row with 10,000 images (one file)", None),
        ("a row with 10,000 distinct images (copies)", "copies"),
        ("a row with 10,000 symlinks to an image outside the folder", "links"),
    ],
)
def test_ten_thousand_images_in_a_row(tmp_path, record, case, images):
    dataset, outside = _layout(tmp_path, [])
    names = ["a.png"] * 10_000
    if images:
        (dataset / "many").mkdir()
        names = [f"many/{i}.png" for i in range(10_000)]
        for name in names:
            if images == "copies":
                shutil.copyfile(dataset / "a.png", dataset / name)
            else:
                os.symlink(outside / "b.png", dataset / name)
    (dataset / "data.jsonl").write_text(
        json.dumps(_sharegpt(names, 10_000)) + "\n" + json.dumps({**NORMAL, "images": ["a.png"]}) + "\n"
    )
    message = _refused(_checked(_timed(dataset, limit=60), outside))
    assert "holds 10,000 image" in message and "above the limit of 1,024 per row" in message
    record("bounds", case, f'VLM101 "{message}"; no image of it is read; the next row is scanned')


def test_a_row_at_the_image_bound_is_counted(tmp_path, record):
    dataset, outside = _layout(tmp_path, [_sharegpt(["a.png"] * MAX_IMAGES_PER_ROW, MAX_IMAGES_PER_ROW)])
    report = _checked(_timed(dataset, limit=60), outside)
    codes = sorted({f["code"] for f in _row_findings(report, 1)})
    assert "VLM101" not in codes and report["summary"]["samples"] == 2
    assert report["summary"]["image_tokens_per_image"]["max"] == 4
    record(
        "bounds",
        "a row with 1,024 images (the bound) and 1,024 <image>",
        f"counted, every image (findings {', '.join(codes)}: too long for the model); peak memory below 1 GiB",
    )


def test_a_million_placeholders_and_images(tmp_path, record):
    dataset, outside = _layout(tmp_path, [_sharegpt(["a.png"] * 1_000_000, 1_000_000)])
    message = _refused(_checked(_timed(dataset, limit=60), outside))
    assert "holds 1,000,000 image" in message
    record(
        "bounds", "a row with 1,000,000 <image> and 1,000,000 images", f'VLM101 "{message}"; within seconds'
    )


def test_a_million_placeholders_one_image(tmp_path, record):
    dataset, outside = _layout(tmp_path, [_sharegpt(["a.png"], 1_000_000)])
    message = _refused(_checked(_timed(dataset, limit=60), outside))
    assert "1,000,000 image placeholders" in message
    record(
        "bounds", "a row with 1,000,000 <image> and one image", f'VLM101 "{message}"; the text is not split'
    )


def test_placeholders_spread_over_turns(tmp_path, record):
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": "<image>" * 1_000} for i in range(50)]
    dataset, outside = _layout(tmp_path, [{"messages": turns, "images": ["a.png"]}])
    message = _refused(_checked(_timed(dataset, limit=60), outside))
    assert "above the limit of 1,024 per row" in message
    record("bounds", "50 turns of 1,000 <image> each (each turn below the bound)", f'VLM101 "{message}"')


def test_typed_image_parts(tmp_path, record):
    content = [{"type": "image", "image": "a.png"}] * 5_000
    typed = [{"type": "image", "image": "a.png"}, {"type": "text", "text": "hi"}]
    normal = {"messages": [{"role": "user", "content": typed}, {"role": "assistant", "content": "ok"}]}
    dataset, outside = _layout(tmp_path, [{"messages": [{"role": "user", "content": content}]}], normal)
    message = _refused(_checked(_timed(dataset, limit=60), outside))
    assert "image placeholders, above the limit of 1,024 per row" in message
    record("bounds", "an openai row with 5,000 typed image parts", f'VLM101 "{message}"')


def test_many_turns(tmp_path, record):
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(200_000)]
    dataset, outside = _layout(tmp_path, [{"messages": turns}])
    message = _refused(_checked(_timed(dataset, limit=60), outside))
    assert "200,000 turns and content parts, above the limit of 10,000 per row" in message
    record("bounds", "a row with 200,000 turns", f'VLM101 "{message}"')


def test_frames_and_videos(tmp_path, record):
    frames = ["a.png"] * 20_000
    row = {"messages": [{"role": "user", "content": "<video>hi"}], "videos": [frames]}
    videos = {"messages": [{"role": "user", "content": "<video>" * 5_000}], "videos": ["v.mp4"] * 5_000}
    dataset, outside = _layout(tmp_path, [row, videos])
    report = _checked(_timed(dataset, limit=60), outside)
    first, second = (_row_findings(report, line) for line in (1, 2))
    assert [f["code"] for f in first] == ["VLM101"] and "20,000 video frames" in first[0]["message"]
    assert [f["code"] for f in second] == ["VLM101"] and "5,000 videos and audio clips" in second[0][
        "message"
    ]
    assert _row_findings(report, 3) == []
    record("bounds", "a frame-list video of 20,000 frames", f'VLM101 "{first[0]["message"]}"')
    record("bounds", "a row with 5,000 videos and 5,000 <video>", f'VLM101 "{second[0]["message"]}"')


def test_special_tokens_in_many_turns(tmp_path, record):
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": "<|im_start|>x"} for i in range(2_000)
    ]
    dataset, outside = _layout(tmp_path, [{"messages": turns}])
    report = _checked(_timed(dataset, limit=90), outside)
    messages = [f["message"] for f in _row_findings(report, 1)]
    special = next(m for m in messages if m.startswith("special token <|im_start|>"))
    assert len(special) < 400 and "and 1,980 more" in special
    assert all(len(m) <= MAX_MESSAGE_CHARS + 40 for m in messages)
    record(
        "bounds",
        "a special token in each of 2,000 turns",
        f'VLM304 "{shape(special)}" (20 turns named); every message at most {MAX_MESSAGE_CHARS:,} characters',
    )


def test_a_million_literal_image_tokens(tmp_path, record):
    row = {
        "messages": [{"role": "user", "content": "<image>" + "<|image_pad|>" * 1_000_000}],
        "images": ["a.png"],
    }
    dataset, outside = _layout(tmp_path, [row])
    report = _checked(_timed(dataset, limit=90), outside)
    codes = sorted({f["code"] for f in _row_findings(report, 1)})
    assert "VLM302" in codes or "VLM304" in codes
    assert all(len(f["message"]) <= MAX_MESSAGE_CHARS + 40 for f in report["findings"])
    record(
        "bounds",
        "a row with 1,000,000 literal <(/image_pad/)> (Qwen's image token)",
        f"findings {', '.join(codes)}; the text is scanned in one pass, not held as 1,000,000 matches",
    )


# ---- repeated ids ------------------------------------------------------------------------------------


def _duplicates(path: Path, rows: int, id_text: str = "x") -> None:
    line = json.dumps({"id": id_text, "image": "a.png", "text": "hi"}) + "\n"
    with open(path, "w", encoding="utf-8") as out:
        for _ in range(rows // 1000):
            out.write(line * 1000)


def test_repeated_ids_are_bounded(tmp_path, record):
    dataset, outside = _layout(tmp_path, [])
    _duplicates(dataset / "dup.jsonl", 20_000)
    run = _scan(dataset, timeout=180, source="dup.jsonl")
    report = _checked(run, outside)
    assert report["summary"]["samples"] == 20_000
    assert report["summary"]["by_code"] == {"VLM107": MAX_DUPLICATE_FINDINGS}
    assert len(run.stdout) < 2_000_000  # 1,000 findings, whatever the rows
    last = report["findings"][-1]["message"]
    assert last.endswith("later ones are not reported")
    record(
        "bounds",
        "20,000 rows with one id",
        f'{MAX_DUPLICATE_FINDINGS:,} VLM107 findings, the last "{last}"; report under 2 MB',
    )


def test_the_duplicate_id_rule_is_linear():
    """The rule alone, in this process: twice the rows of one repeated id, about twice the time."""
    from vlmlint.records import RowResult, Sample
    from vlmlint.rules.base import RuleContext
    from vlmlint.rules.rows import DuplicateId

    context = RuleContext(max_length=None, image_placeholder="")
    seconds = []
    for rows in (50_000, 100_000):
        results = [RowResult(Sample(source="a.jsonl", index=i, line=i + 1, id="x")) for i in range(rows)]
        rule = DuplicateId()
        start = time.perf_counter()
        found = sum(1 for row in results for _ in rule.check(row, context))
        seconds.append(time.perf_counter() - start)
        assert found == MAX_DUPLICATE_FINDINGS
    assert seconds[1] < 3 * seconds[0], seconds  # linear (quadratic would be 4x)


def test_long_repeated_ids_in_parquet(tmp_path, record):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    dataset, outside = _layout(tmp_path, [])
    rows = 300
    ids = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["i" * 1_000_000]))
    table = pa.table({"id": ids, "image": ["a.png"] * rows, "text": ["hi"] * rows})
    pq.write_table(table, dataset / "ids.parquet", compression="zstd")
    size = (dataset / "ids.parquet").stat().st_size
    assert size < 100_000
    run = _timed(dataset, limit=120, source="ids.parquet")
    report = _checked(run, outside)
    assert report["summary"]["by_code"] == {"VLM107": rows - 1}
    assert len(run.stdout) < 2_000_000, len(run.stdout)
    message = report["findings"][0]["message"]
    assert len(message) < 400 and "characters)" in message
    record(
        "bounds",
        "a small parquet file of 300 rows repeating one 1,000,000-character id",
        "299 VLM107 findings, each showing the id by its first 200 characters; report under 2 MB",
    )


# ---- embedded bytes of rows with findings ----------------------------------------------------------


def test_embedded_images_of_flagged_rows_are_not_all_kept(tmp_path, record):
    dataset, outside = _layout(tmp_path, [])
    picture = io.BytesIO()
    Image.frombytes("RGB", (360, 360), os.urandom(360 * 360 * 3)).save(picture, format="PNG")
    uri = "data:image/png;base64," + base64.b64encode(picture.getvalue()).decode("ascii")
    rows = 1_600  # some 600 MB of image bytes, each row with a finding (two <image>, one image)
    line = json.dumps({"messages": [{"role": "user", "content": "<image><image>"}], "images": [uri]}) + "\n"
    with open(dataset / "embedded.jsonl", "w", encoding="ascii") as out:
        for _ in range(rows // 100):
            out.write(line * 100)
    held = rows * len(picture.getvalue()) // 2**20
    run = _timed(dataset, limit=180, timeout=240, source="embedded.jsonl")
    report = _checked(run, outside)
    assert report["summary"]["by_code"]["VLM301"] == rows
    small = _scan(dataset).peak_mb  # one normal row: the base
    # Kept: 64 MiB of bytes, plus the rows in flight (a chunk of the engine, its tokenizer's, the reader's).
    assert run.peak_mb < min(held, small + 330), (run.peak_mb, small, held)
    record(
        "bounds",
        f"{rows:,} rows with findings, each embedding a {len(picture.getvalue()) // 1024} KB data: URI image",
        "each row reported (VLM301); embedded bytes kept for the first 64 MiB of flagged rows only "
        "(HTML thumbnails, --verify), the others dropped once counted; peak memory well below the bytes",
    )


def test_many_long_rows_are_tokenized_in_bounded_chunks(tmp_path, record):
    """Rows near max_text_chars: a tokenizer chunk ends at MAX_BATCH_TEXT_CHARS, not at 256 rows."""
    from vlmlint.engine import MAX_BATCH_TEXT_CHARS

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    text = ("lorem ipsum dolor sit amet " * 34_000)[:900_000]
    with open(dataset / "data.jsonl", "w", encoding="utf-8") as handle:
        for index in range(32):
            turns = [{"from": "human", "value": text}, {"from": "gpt", "value": "ok"}]
            handle.write(json.dumps({"id": index, "conversations": turns}) + "\n")
    run = run_guarded("scan", str(dataset / "data.jsonl"), "--model", MODEL, "--format", "json", cwd=tmp_path)
    assert run.exit_code == 1 and run.codes() == ["VLM404"]
    assert run.report["summary"]["samples"] == 32
    assert run.peak_mb < 1024, run.peak_mb
    record(
        "bounds",
        "32 rows of 900,000 characters each (below max_text_chars)",
        f"each tokenized and counted (VLM404: longer than the model's context); the tokenizer is given "
        f"{MAX_BATCH_TEXT_CHARS:,} characters at most per call; peak memory under 1 GiB",
    )
