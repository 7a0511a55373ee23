"""Pre-tokenized rows: the reader, the fixtures (real Qwen2-VL processor output) and VLM501-VLM504."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from tests.conftest import DATASETS, FIXTURES, PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.readers.layouts import ImageResolver, array_shape, detect_layout, row_to_sample


def _builder():
    spec = importlib.util.spec_from_file_location("pretokenized_fixtures", FIXTURES / "pretokenized.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATASETS / name / "data.jsonl").read_text().splitlines()]


def parse(row, layout=None):
    return row_to_sample(row, layout=layout, resolve=ImageResolver("/data"), source="m.jsonl", index=0)


def test_fixtures_are_the_real_processor_output(tmp_path):
    """Rebuilding with the real Qwen2VLProcessor gives the stored files byte for byte."""
    _builder().build(tmp_path / "datasets", PROCESSORS, tmp_path / "expected")
    for name in ("pretokenized", "pretokenized_broken"):
        assert (tmp_path / "datasets" / name / "data.jsonl").read_bytes() == (
            DATASETS / name / "data.jsonl"
        ).read_bytes(), f"{name}: run python fixtures/pretokenized.py"
        assert (tmp_path / "expected" / f"{name}.json").read_bytes() == (
            FIXTURES / "expected" / f"{name}.json"
        ).read_bytes()


def _legacy_rope_index(ids: list[int], grids: list[list[int]], image_token_id: int, merge: int) -> np.ndarray:
    """transformers 4.x Qwen2-VL get_rope_index (by image token positions): an independent formulation."""
    pieces: list[np.ndarray] = []
    start = 0
    for grid_t, grid_h, grid_w in grids:
        end = ids.index(image_token_id, start)
        t, h, w = grid_t, grid_h // merge, grid_w // merge
        offset = pieces[-1].max() + 1 if pieces else 0
        text = end - start
        pieces.append(np.broadcast_to(np.arange(text), (3, text)) + offset)
        grid = np.stack(
            [a.flatten() for a in np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")]
        )
        pieces.append(grid + text + offset)
        start = end + t * h * w
    if start < len(ids):
        offset = pieces[-1].max() + 1 if pieces else 0
        pieces.append(np.broadcast_to(np.arange(len(ids) - start), (3, len(ids) - start)) + offset)
    return np.concatenate(pieces, axis=1)


def test_fixture_position_ids_agree_with_the_legacy_get_rope_index():
    config = json.loads((PROCESSORS / "qwen2-vl" / "config.json").read_text())
    for row in _rows("pretokenized"):
        expected = _legacy_rope_index(
            row["input_ids"],
            row.get("image_grid_thw", []),
            config["image_token_id"],
            config["vision_config"]["spatial_merge_size"],
        )
        assert np.array_equal(np.asarray(row["position_ids"]), expected), row["id"]


def test_pretokenized_rows_are_detected_and_kept():
    row = {
        "input_ids": [[1, 2, 3]],  # with its batch dimension of 1
        "attention_mask": np.array([1, 1, 1]),
        "labels": [-100, 2, 3],
        "position_ids": np.zeros((3, 1, 3), dtype=np.int64),
        "image_grid_thw": [1, 2, 2],
        "pixel_values": np.zeros((4, 1176), dtype=np.float32),
        "messages": [{"role": "user", "content": "kept from the raw data"}],
    }
    assert detect_layout(row) == "pretokenized"
    sample = parse(row)
    assert sample.layout == "pretokenized" and not sample.problems and not sample.messages
    data = sample.pretokenized
    assert data["input_ids"] == [1, 2, 3] and data["attention_mask"] == [1, 1, 1]
    assert data["position_ids_shape"] == (3, 1, 3)
    assert data["image_grid_thw"] == [(1, 2, 2)]
    assert data["pixel_values_shape"] == (4, 1176) and "pixel_values" not in data
    assert parse({"input_ids": [1], "pixel_values_shape": [16, 1176]}).pretokenized["pixel_values_shape"] == (
        16,
        1176,
    )


@pytest.mark.parametrize(
    "row,message",
    [
        ({"input_ids": []}, "empty"),
        ({"input_ids": "1 2 3"}, "list of integers"),
        ({"input_ids": [1, 2], "position_ids": [[0, 1], [0]]}, "rectangular"),
        ({"input_ids": [1, 2], "image_grid_thw": [[1, 2]]}, "[t, h, w]"),
        ({"input_ids": [1, 2], "pixel_values": [[0.1, 0.2], [0.3]]}, "ragged"),
    ],
)
def test_malformed_pretokenized_rows(row, message):
    sample = parse(row)
    assert [p.code for p in sample.problems] == ["VLM101"] and message in sample.problems[0].message


def test_array_shape():
    assert array_shape([[1, 2], [3, 4], [5, 6]]) == (3, 2)
    assert array_shape([]) == (0,)
    assert array_shape([[1, 2], [3]]) is None
    assert array_shape([[1], 2]) is None
    assert array_shape(np.zeros((2, 3, 4))) == (2, 3, 4)


def test_broken_rows_name_their_numbers():
    scanner = Scanner(
        ScanConfig(dataset=str(DATASETS / "pretokenized_broken"), model=str(PROCESSORS / "qwen2-vl"))
    )
    findings = {f.code: f for outcome in scanner.scan() for f in outcome.findings}
    assert sorted(findings) == ["VLM501", "VLM502", "VLM503", "VLM504"]
    assert "tokens: 47, features: 48" in findings["VLM501"].message
    assert "image 1 needs 48 <|image_pad|> ids, input_ids has 47" in findings["VLM501"].fix
    assert "(2, 70)" in findings["VLM502"].message and "(3, 70)" in findings["VLM502"].fix
    assert "labels 50" in findings["VLM503"].message and "labels 51 entries" in findings["VLM503"].fix
    assert "15 patch rows" in findings["VLM504"].message and "16 rows" in findings["VLM504"].fix
