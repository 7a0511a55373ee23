"""`--pipeline qwen-vl-finetune` against Qwen's own fine-tune code (QwenLM/Qwen3-VL 9658872).

tests/trainers/qwen_vl_finetune_truth.json is recorded by tests/trainers/record_qwen_vl_finetune.py, which
runs qwen-vl-finetune/qwenvl/data/data_processor.py from the source with torch, on transformers 4.57.1 (the
README's) and 5.24.0: update_processor_pixels with sft.sh's pixels, LazySupervisedDataset.__getitem__ and
both collators, for 8 rows on the qwen2-vl, qwen2.5-vl and qwen3-vl profiles (real tokenizers) and the
fixtures/processors/qwen2-vl folder (a synthetic tokenizer), each image's tokens, the row that trains,
the length and labels, and for 9 model_max_length the cut's length, labels and image tokens.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest
from PIL import Image
from typer.testing import CliRunner

from vlmlint.cli import app
from vlmlint.models.profiles import find_profile, profile_folder
from vlmlint.pipelines import PipelineError, load_pipeline
from vlmlint.pipelines.qwen_vl_finetune import COMMIT, DEFAULTS

TRUTH = json.loads(Path(__file__).with_name("trainers").joinpath("qwen_vl_finetune_truth.json").read_text())
ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
VERSIONS = {"4.57.1": "4.57", "5.24.0": "5"}  # recorded transformers -> the pipeline's option


def test_the_truth_is_of_the_reproduced_commit_and_script():
    assert TRUTH["commit"] == COMMIT
    assert (TRUTH["min_pixels"], TRUTH["max_pixels"]) == (DEFAULTS["min_pixels"], DEFAULTS["max_pixels"])
    assert set(TRUTH["transformers"]) == set(VERSIONS)


def _model(name: str) -> Path:
    return ROOT / name if "/" in name else profile_folder(find_profile(name))


def _dataset(tmp_path: Path) -> Path:
    rows = []
    for number, recorded in enumerate(TRUTH["rows"]):
        row = {k: v for k, v in recorded.items() if k != "image"}
        if "image" in recorded:
            sizes = recorded["image"] if isinstance(recorded["image"][0], list) else [recorded["image"]]
            names = []
            for k, (width, height) in enumerate(sizes):
                names.append(f"r{number}_{k}.png")
                Image.new("RGB", (width, height), (k * 40, 90, 200)).save(tmp_path / names[-1])
            row["image"] = names if len(names) > 1 else names[0]
        rows.append(row)
    path = tmp_path / "train.json"
    path.write_text(json.dumps(rows))
    return path


def _scan(dataset: Path, model: Path | str, *options: str) -> list[dict]:
    args = [
        "scan",
        str(dataset),
        "--model",
        str(model),
        "--pipeline",
        "qwen-vl-finetune",
        "--format",
        "jsonl",
    ]
    for option in options:
        args += ["--pipeline-option", option]
    result = runner.invoke(app, [*args, "--all-rows", "--fail-on", "info", "--jobs", "1"])
    assert result.exit_code in (0, 1), result.output
    return [orjson.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _assert_dropped(outcome: dict) -> None:
    """Dropped, or not counted at all where the chat template renders no image in an assistant turn
    (Qwen3-VL's): the placeholder finding (VLM301) says so then."""
    if outcome["trainer"] is None:
        assert "VLM301" in outcome["findings"], outcome
    else:
        assert outcome["trainer"]["status"] == "dropped", outcome


CASES = [
    (version, name) for version in sorted(TRUTH["transformers"]) for name in TRUTH["transformers"][version]
]


@pytest.mark.parametrize(("version", "name"), CASES, ids=lambda c: str(c).replace("/", "_"))
def test_flattened_rows_as_the_script(tmp_path, version, name):
    """sft.sh (data_flatten True): every row's image tokens and whole length; the refused row dropped."""
    recorded = TRUTH["transformers"][version][name]
    outcomes = _scan(_dataset(tmp_path), _model(name), f"transformers={VERSIONS[version]}")
    assert len(outcomes) == len(recorded)
    for index, (outcome, truth) in enumerate(zip(outcomes, recorded, strict=True)):
        fate = outcome["trainer"]
        if truth["trained"] != index:  # __getitem__ gave the next row: this one never trains
            assert truth["raises"]
            _assert_dropped(outcome)
            continue
        assert outcome["image_tokens"] == truth["image_tokens"], index
        assert fate["status"] == "kept" and fate["length"] == truth["flattened_length"] == truth["length"], (
            index
        )


# Each a model load per limit: the cuts on four of the eight cases, five of the nine recorded limits (kept,
# truncated with labels lost, crash through an image, on both transformers) keep the file under 2 minutes.
CUT_CASES = [
    ("4.57.1", "qwen2-vl"), ("4.57.1", "qwen3-vl"), ("4.57.1", "fixtures/processors/qwen2-vl"), ("5.24.0", "qwen2.5-vl"),
]  # fmt: skip
CUT_LIMITS = (60, 100, 150, 200, 400)


@pytest.mark.parametrize(("version", "name"), CUT_CASES, ids=lambda c: str(c).replace("/", "_"))
def test_cut_rows_as_the_collator(tmp_path, version, name):
    """data_flatten False: DataCollatorForSupervisedDataset cuts at the tokenizer's own model_max_length
    (a copy of the processor folder whose tokenizer_config.json says each limit)."""
    recorded = TRUTH["transformers"][version][name]
    dataset = _dataset(tmp_path)
    for limit in CUT_LIMITS:
        folder = tmp_path / f"model{limit}"
        shutil.copytree(_model(name), folder)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": limit}))
        outcomes = _scan(dataset, folder, f"transformers={VERSIONS[version]}", "data_flatten=false")
        for index, (outcome, truth) in enumerate(zip(outcomes, recorded, strict=True)):
            fate = outcome["trainer"]
            if truth["trained"] != index:
                _assert_dropped(outcome)
                continue
            run = next(r for r in truth["runs"] if r["model_max_length"] == limit)
            where = (limit, index, fate)
            assert fate["length"] == run["length"], where
            if run["image_tokens"] < sum(truth["image_tokens"]):
                assert fate["status"] == "crash", where
                assert fate["image_tokens_lost"] == sum(truth["image_tokens"]) - run["image_tokens"], where
            elif run["length"] < truth["length"]:
                assert fate["status"] == "truncated", where
                assert fate["answer_tokens_lost"] == truth["labels"] - run["labels"], where
            else:
                assert fate["status"] == "kept", where


def test_options_are_checked():
    pipeline = load_pipeline("qwen-vl-finetune", {"transformers": 5, "data_flatten": False})
    assert not pipeline.pixels_applied and not pipeline.data_flatten
    for bad in ({"max_pixels": 0}, {"data_flatten": "yes"}, {"transformers": "3"}, {"nope": 1}):
        with pytest.raises(PipelineError):
            load_pipeline("qwen-vl-finetune", bad)


def test_other_families_are_refused(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    result = runner.invoke(
        app, ["scan", str(tmp_path / "d.jsonl"), "--model", "internvl3.5", "--pipeline", "qwen-vl-finetune"]
    )
    assert result.exit_code == 2 and "Qwen's fine-tune scripts train" in result.output


def test_rows_the_script_cannot_read_are_dropped(tmp_path):
    Image.new("RGB", (64, 64)).save(tmp_path / "a.png")
    rows = [  # LLaMA-Factory's sharegpt keys (images, not image), and the OpenAI messages layout
        {"images": ["a.png"], "conversations": [{"from": "human", "value": "<image>Hi"}, {"from": "gpt", "value": "Yo"}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]},
    ]  # fmt: skip
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    outcomes = _scan(path, "qwen2-vl")
    assert [o["trainer"]["status"] for o in outcomes] == ["dropped", "dropped"]
