"""`--pipeline internvl` against InternVL's own fine-tuning code (commit 2410d1d).

tests/trainers/internvl_truth.json is recorded by tests/trainers/record_internvl.py, which runs
dataset.py's dynamic_preprocess and preprocess_internvl2_5 from the InternVL source with torch and the
internvl3.5 profile's real tokenizer: the tile count of 20 sizes x 7 budgets x thumbnail on/off, and for
6 rows (one image, several images sharing the budget, a system turn, a long answer) x 6 max_seq_length
the length of input_ids, the `</img>` the cut keeps and the labels it keeps.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from PIL import Image
from typer.testing import CliRunner

from vlmlint.cli import app
from vlmlint.pipelines import PipelineError, load_pipeline
from vlmlint.pipelines.internvl import COMMIT, SYSTEM_MESSAGE, tiles

TRUTH = json.loads(Path(__file__).with_name("trainers").joinpath("internvl_truth.json").read_text())
runner = CliRunner()


def test_the_truth_is_of_the_reproduced_commit():
    assert TRUTH["commit"] == COMMIT
    assert TRUTH["system_message"] == SYSTEM_MESSAGE


@pytest.mark.parametrize("case", TRUTH["tiles"], ids=lambda c: "x".join(map(str, c[:4])))
def test_tiles_as_dynamic_preprocess(case):
    width, height, budget, thumbnail, expected = case
    assert tiles(width, height, 1, budget, 448, thumbnail)[1] == expected


def _scan(tmp_path: Path, rows: list[dict], *options: str) -> list[dict]:
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = ["scan", str(path), "--model", "internvl3.5", "--pipeline", "internvl", "--format", "jsonl"]
    for option in options:
        args += ["--pipeline-option", option]
    result = runner.invoke(app, [*args, "--all-rows", "--fail-on", "info"])
    assert result.exit_code in (0, 1), result.output
    return [orjson.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _rows(tmp_path: Path) -> list[dict]:
    rows = []
    for number, recorded in enumerate(TRUTH["rows"]):
        sizes = recorded["image"] if isinstance(recorded["image"][0], list) else [recorded["image"]]
        names = []
        for k, (width, height) in enumerate(sizes):
            name = f"r{number}_{k}_{width}x{height}.png"
            Image.new("RGB", (width, height)).save(tmp_path / name)
            names.append(name)
        conversations = [{"from": who, "value": value} for who, value in recorded["conversations"]]
        rows.append(
            {"id": number, "image": names if len(names) > 1 else names[0], "conversations": conversations}
        )
    return rows


@pytest.mark.parametrize("limit", [run["max_seq_length"] for run in TRUTH["rows"][0]["runs"]])
def test_rows_as_preprocess_internvl2_5(tmp_path, limit):
    outcomes = _scan(tmp_path, _rows(tmp_path), f"max_seq_length={limit}")
    assert len(outcomes) == len(TRUTH["rows"])
    for outcome, recorded in zip(outcomes, TRUTH["rows"], strict=True):
        assert outcome["image_tokens"] == recorded["image_tokens"]
        full = recorded["runs"][-1]  # 16384: nothing cut
        run = next(r for r in recorded["runs"] if r["max_seq_length"] == limit)
        fate = outcome["trainer"]
        images = len(recorded["image_tokens"])
        assert fate["length"] == run["length"], (outcome["index"], fate)
        if run["img_end"] < images:
            assert fate["status"] == "dropped"  # the script's assertion: a random other row trains instead
        elif run["length"] < full["length"]:
            assert fate["status"] == "truncated"
            assert fate["answer_tokens_lost"] == full["labels"] - run["labels"]
        else:
            assert fate["status"] == "kept"


def test_valid_internvl_rows_have_no_finding(tmp_path):
    for width, height, name in ((640, 480, "cat.jpg"), (448, 672, "doc.png"), (1024, 256, "wide.png")):
        Image.new("RGB", (width, height)).save(tmp_path / name)
    rows = [  # InternVL's "Chat Data Format" (docs: single image, multi-image, pure text)
        {"id": 0, "image": "cat.jpg", "conversations": [{"from": "human", "value": "What is it?"}, {"from": "gpt", "value": "A cat."}]},
        {"id": 1, "image": "cat.jpg", "conversations": [{"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A cat."}]},
        {"id": 2, "image": ["doc.png", "wide.png"], "conversations": [{"from": "human", "value": "Image-1: <image>\nImage-2: <image>\nCompare."}, {"from": "gpt", "value": "Two."}]},
        {"id": 3, "conversations": [{"from": "human", "value": "Hello"}, {"from": "gpt", "value": "Hi."}]},
    ]  # fmt: skip
    outcomes = _scan(tmp_path, rows)
    assert [o["findings"] for o in outcomes] == [[], [], [], []]
    # the implicit <image> is placed as the script places it: the same count as the explicit one
    assert (
        outcomes[0]["image_tokens"] == outcomes[1]["image_tokens"] == [256 * 13]
    )  # 4:3 -> 4x3 tiles + thumbnail
    assert outcomes[0]["trainer"]["length"] == outcomes[1]["trainer"]["length"]
    # two images share max_dynamic_patch 12: 6 each (2x3 + thumbnail, 4x1 + thumbnail)
    assert outcomes[2]["image_tokens"] == [256 * 7, 256 * 5]
    halved = _scan(tmp_path, rows[2:3], "max_dynamic_patch=4")
    assert halved[0]["image_tokens"] == [256 * 3, 256 * 3]  # 2 tiles each (1x2, 2x1) + thumbnail


def test_options_are_checked():
    assert load_pipeline("internvl", {"down_sample_ratio": 0.25}).num_image_token == 64
    for bad in ({"max_dynamic_patch": 0}, {"use_thumbnail": "yes"}, {"down_sample_ratio": 2}, {"nope": 1}):
        with pytest.raises(PipelineError):
            load_pipeline("internvl", bad)


def test_other_families_are_refused(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    result = runner.invoke(
        app, ["scan", str(tmp_path / "d.jsonl"), "--model", "qwen2-vl", "--pipeline", "internvl"]
    )
    assert result.exit_code == 2 and "InternVL checkpoints" in result.output
