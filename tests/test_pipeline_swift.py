"""--pipeline swift: vlmlint's per-row predictions against ms-swift 4.6.0's own template.

tests/trainers/swift_truth.json holds what `Template.encode` (train mode, the Qwen2-VL template) did with
every fixture row for several max_length values, truncation strategies and loss scales, recorded by
tests/trainers/record_swift.py in a throwaway environment with torch and ms-swift (vlmlint installs
neither): MaxLengthError, or the encoded length, the labels left and the image tokens kept.
tests/trainers/swift_truth_<template>.json hold the same for the other templates vlmlint reproduces
(llama4, glm4v, glm4_5v, minicpmv4_6, minicpmv4_7), each with its fixture processor; glm4_5v's
truncation of a row with images fails in swift itself (IndexError), which swift sft skips.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import build_config
from vlmlint.engine import Scanner
from vlmlint.models import load_model
from vlmlint.pipelines import PipelineError, load_pipeline, swift
from vlmlint.pipelines.layout import Layout
from vlmlint.pipelines.swift import SWIFT_VERSION

TRUTHS = {
    path.name: json.loads(path.read_text())
    for path in sorted((Path(__file__).parent / "trainers").glob("swift_truth*.json"))
}
TRUTH = TRUTHS["swift_truth.json"]
MODEL = TRUTH["model"]


@cache
def _model(name: str):
    return load_model(str(PROCESSORS / name))


def _results(dataset: str, model: str = MODEL, **options) -> dict[int, object]:
    config = build_config(
        str(DATASETS / dataset),
        {},
        {"model": str(PROCESSORS / model), "jobs": 1, "pipeline": "swift", "pipeline_options": options},
    )
    scanner = Scanner(config, model=_model(model))
    return {outcome.result.sample.index: outcome.result for outcome in scanner.scan()}


def _groups():
    groups: dict[tuple, list[dict]] = {}
    for truth in TRUTHS.values():
        for case in truth["rows"]:
            key = (truth["model"], case["dataset"], case["max_length"], case["strategy"], case["loss_scale"])
            groups.setdefault(key, []).append(case)
    return sorted(groups.items())


def test_truth_was_recorded_with_the_pinned_version():
    assert {truth["trainer"] for truth in TRUTHS.values()} == {SWIFT_VERSION}
    # every reproduced template has its record, with its own fixture processor
    recorded = {truth.get("template", "qwen2_vl") for truth in TRUTHS.values()}
    assert {template.name for template in swift.REPRODUCED.values()} <= recorded
    assert not set(swift.REPRODUCED) & set(swift.NOT_REPRODUCED)
    kinds = {
        "error" if case.get("error") else "cut" if case["full_length"] > case["max_length"] else "kept"
        for case in TRUTH["rows"]
    }
    assert kinds == {"error", "cut", "kept"}
    # a cut that leaves only image tokens (longer than max_length), and one that loses labels
    assert any(case.get("length", 0) > case["max_length"] for case in TRUTH["rows"])
    assert any(case.get("labels", 1) == 0 and case["answer_tokens"] for case in TRUTH["rows"])


def _added(model: str) -> tuple[int, int]:
    from vlmlint.counting import _added_special

    loaded = _model(model)
    return _added_special(loaded.tokenizer) if loaded.family.add_special_tokens else (0, 0)


@pytest.mark.parametrize(
    ("key", "cases"), _groups(), ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else ""
)
def test_predictions_match_swift(key, cases):
    model, dataset, max_length, strategy, loss_scale = key
    results = _results(
        dataset, model, max_length=max_length, truncation_strategy=strategy, loss_scale=loss_scale
    )
    for case in cases:
        result = results[case["index"]]
        fate = result.trainer
        where = (model, dataset, case["index"], max_length, strategy, loss_scale, fate.reason)
        if model == MODEL:  # Qwen2-VL: the chat template gives swift's tokens as they are
            assert result.seq_len == case["full_length"], where
        if case.get("error", "").startswith("IndexError"):  # swift's own failure: sft skips the row
            assert fate.status == "dropped" and "IndexError" in fate.reason, where
            continue
        if case.get("error"):
            assert fate.status == "raise", where
            assert case["error"].startswith(fate.reason.split(";")[0]), where  # swift's own message
            continue
        if case["full_length"] <= max_length:
            assert fate.length == case["full_length"], where
        assert fate.length == case["length"], where
        assert fate.image_tokens_lost == 0, where  # _truncate keeps every image token
        kept = sum(info.tokens for info in result.images)
        if "Llama4" in (_model(model).processor_class or ""):  # _truncate also keeps each <|image|>
            kept += len(result.images)
        assert case["image_tokens"] == kept, where
        if case["full_length"] > max_length:
            assert fate.status == "truncated", where
            lost = case["answer_tokens"] - case["labels"]
            if loss_scale == "all":
                # every token is a label but the first, the image tokens and (a gap vlmlint leaves)
                # the tokens swift's image tag writes around them: <|vision_start|>, <|vision_end|>,
                # Llama 4's <|image_start|>, tile separators, <|image_end|>: the rest of the unlabelled
                markers = case["full_length"] - 1 - case["answer_tokens"] - case["image_tokens"]
                assert markers <= 2 * len(result.images) or model != MODEL, where
                assert 0 <= fate.answer_tokens_lost - lost <= markers, where
            else:
                assert fate.answer_tokens_lost == lost, where
        else:
            assert fate.status == "kept", where


def test_delete_drops_what_raise_raises_and_strict_raises():
    raised = _results("llava/data.jsonl", max_length=420, truncation_strategy="raise")
    deleted = _results("llava/data.jsonl", max_length=420)  # delete is swift's default
    strict = _results("llava/data.jsonl", max_length=420, strict=True)
    for index, result in raised.items():
        if result.trainer is None:
            continue
        expected = {"raise": "dropped", "kept": "kept"}[result.trainer.status]
        assert deleted[index].trainer.status == expected
        assert strict[index].trainer.status == result.trainer.status
    dropped = deleted[0].trainer
    assert dropped.trainer == "ms-swift 4.6.0 (max_length 420, truncation_strategy delete)"
    assert "447 tokens are over max_length 420" in dropped.reason and "raise max_length to 447" in dropped.fix


def test_default_max_length_is_the_models():
    results = _results("llava/data.jsonl")  # max_model_len: 32768 for the fixture's config
    assert {result.trainer.status for result in results.values() if result.trainer} == {"kept"}


def test_max_pixels_rescales_like_swifts_rescale_image():
    pipeline = load_pipeline("swift", {"max_pixels": 100_000})
    assert pipeline.resize(480, 640) == (273, 365)  # sqrt(100000 / (640/480)) = 273.86, * 4/3 = 365.1
    assert pipeline.resize(200, 300) == (200, 300)  # under the limit: untouched
    plain = _results("llava/data.jsonl", max_length=4096)
    small = _results("llava/data.jsonl", max_length=4096, max_pixels=100_000)
    assert small[1].seq_len < plain[1].seq_len


def test_images_are_opened_without_exif_orientation():
    assert load_pipeline("swift").exif_transpose is False  # swift's load_image: Image.open only


def test_options_are_validated():
    with pytest.raises(PipelineError, match="pre-training only"):
        load_pipeline("swift", {"truncation_strategy": "split"})
    with pytest.raises(PipelineError, match="truncation_strategy must be one of"):
        load_pipeline("swift", {"truncation_strategy": "middle"})
    with pytest.raises(PipelineError, match="loss_scale"):
        load_pipeline("swift", {"loss_scale": "ignore_empty_think"})
    with pytest.raises(PipelineError, match="max_length"):
        load_pipeline("swift", {"max_length": -5})
    with pytest.raises(PipelineError, match="strict"):
        load_pipeline("swift", {"strict": "maybe"})


# Synthetic layouts: where ms-swift's _truncate cuts when images carry tile markers.


def test_protected_cut_skips_image_tokens_and_counts_markers():
    # tokens 0-9 text, 10-29 an image span of 18 image tokens and 2 markers, 30-49 text (answer 40-50)
    layout = Layout(50, ((40, 50),), ((10, 30, 18),))
    assert layout.protected_cut(5, "right") == 5  # the first 5 text tokens
    assert layout.protected_cut(11, "right") == 30  # 10 text + 1 marker: the cut moves past the span
    assert layout.protected_cut(20, "right") == 38  # 10 + 2 markers + 8 after the span
    assert layout.answer_lost_past(38) == 10
    assert layout.protected_cut(15, "left") == 35  # the last 15 text tokens: 35-49
    assert layout.answer_lost_before(35) == 0
    assert layout.protected_cut(25, "left") == 7  # 20 after the span, its 2 markers, 3 before it
    assert layout.answer_lost_before(7) == 0
