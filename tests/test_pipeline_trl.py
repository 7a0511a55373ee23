"""--pipeline trl: vlmlint's per-row predictions against TRL 1.16.0's own collator.

tests/trainers/trl_truth.json holds what `DataCollatorForVisionLanguageModeling` (the collator SFTTrainer
builds for a vision dataset) did with every fixture row at several max_length values, recorded by
tests/trainers/record_trl.py in a throwaway environment with torch and trl (vlmlint installs neither).
The collator's truncation itself is the processor call it makes; that call runs here too, live, for a
second check on more models.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
from PIL import Image, ImageOps

from tests.conftest import DATASETS, PROCESSORS, real_processor
from vlmlint.config import build_config
from vlmlint.engine import Scanner
from vlmlint.models import load_model
from vlmlint.pipelines import PipelineError, load_pipeline
from vlmlint.pipelines.trl import TRL_VERSION

TRUTH = json.loads((Path(__file__).parent / "trainers" / "trl_truth.json").read_text())


@cache
def _model(name: str):
    return load_model(str(PROCESSORS / name))


def _fates(model: str, dataset: str, **options) -> dict[int, object]:
    config = build_config(
        str(DATASETS / dataset),
        {},
        {"model": str(PROCESSORS / model), "jobs": 1, "pipeline": "trl", "pipeline_options": options},
    )
    scanner = Scanner(config, model=_model(model))
    return {outcome.result.sample.index: outcome.result for outcome in scanner.scan()}


def _groups():
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for case in TRUTH["rows"]:
        groups.setdefault((case["model"], case["dataset"], case["max_length"]), []).append(case)
    return sorted(groups.items())


def test_truth_was_recorded_with_the_pinned_version():
    assert TRUTH["trainer"] == TRL_VERSION
    assert {case["model"] for case in TRUTH["rows"]} == {"qwen2-vl", "smolvlm-256m-instruct", "gemma-3-4b-it"}
    outcomes = {
        ("error" if case["error"] else "cut" if case["length"] < case["full_length"] else "kept")
        for case in TRUTH["rows"]
    }
    assert outcomes == {"error", "cut", "kept"}  # every outcome is exercised


@pytest.mark.parametrize(
    ("key", "cases"), _groups(), ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else ""
)
def test_predictions_match_trl(key, cases):
    model, dataset, max_length = key
    results = _fates(model, dataset, max_length=max_length)
    for case in cases:
        result = results[case["index"]]
        fate = result.trainer
        where = (model, dataset, case["index"], max_length, fate.reason)
        if case["error"]:
            assert fate.status == "crash", where
            found = re.search(r"ids=\[(\d+)\] and text=\[(\d+)\]", case["error"])
            if found:  # the processor's check says how many image tokens the cut kept
                assert fate.image_tokens_lost == int(found[2]) - int(found[1]), where
            continue
        assert fate.length == case["length"], where
        if case["length"] < case["full_length"]:
            assert fate.status == "truncated", where
            if case["answer_tokens"] is not None:
                assert fate.answer_tokens_lost == case["answer_tokens"] - case["answer_tokens_kept"], where
        else:
            assert fate.status == "kept", where


def _live(processor, sample, max_length):
    """The processor call TRL's collator makes (trl/trainer/sft_trainer.py), without torch tensors."""
    images = iter(ImageOps.exif_transpose(Image.open(ref.path)).convert("RGB") for ref in sample.images)
    conversation = [
        {
            "role": message.role.value,
            "content": [
                {"type": "image", "image": next(images)}
                if part.is_image
                else {"type": "text", "text": part.text}
                for part in message.parts
            ],
        }
        for message in sample.messages
    ]
    kwargs = {
        "padding": True,
        "padding_side": "right",
        "truncation": max_length is not None,
        "max_length": max_length,
        "add_special_tokens": False,
    }
    try:
        out = processor.apply_chat_template(
            [conversation], tokenize=True, return_dict=True, processor_kwargs=kwargs
        )
    except (ValueError, TypeError):  # the image-token check (or Idefics3's own failure on a cut image)
        return None
    return len(out["input_ids"][0])


@pytest.mark.parametrize("model", ["qwen2-vl", "smolvlm-256m-instruct", "gemma-3-4b-it", "llava-1.5-7b"])
def test_predictions_match_the_collators_processor_call_live(model):
    processor = real_processor(PROCESSORS / model)
    for max_length in (30, 200):
        results = _fates(model, "llava/data.jsonl", max_length=max_length)
        for index in (0, 2, 3, 4, 12, 15):
            result = results[index]
            full = _live(processor, result.sample, None)
            cut = _live(processor, result.sample, max_length)
            expected = "crash" if cut is None else "truncated" if cut < full else "kept"
            assert result.trainer.status == expected, (model, max_length, index, result.trainer.reason)
            if cut is not None:
                assert result.trainer.length == cut


def test_crash_and_truncation_reasons():
    results = _fates("qwen2-vl", "llava/data.jsonl", max_length=420)
    crash, cut, kept = results[1].trainer, results[0].trainer, results[2].trainer
    assert crash.status == "crash" and crash.image_tokens_lost == 999 - 405
    assert "Mismatch in `image` token count" in crash.reason and "raise max_length to 1054" in crash.fix
    assert cut.status == "truncated" and cut.length == 420 and cut.answer_tokens_lost == 26
    assert "the answer is gone entirely" in cut.reason
    assert kept.status == "kept" and kept.length == 360 and kept.trainer == "TRL 1.16.0 (max_length 420)"


def test_default_max_length_is_trls_1024_and_none_turns_truncation_off():
    assert load_pipeline("trl").max_length == 1024
    default = _fates("qwen2-vl", "llava/data.jsonl")
    assert default[1].trainer.status == "truncated"  # 1054 tokens, its image ends at token 1014
    assert default[20].trainer.status == "crash"  # 2740 tokens, its image runs to token 2706
    off = _fates("qwen2-vl", "llava/data.jsonl", max_length="none")
    assert {result.trainer.status for result in off.values() if result.trainer} == {"kept"}


def test_options_are_validated():
    with pytest.raises(PipelineError, match="keep_end is refused"):
        load_pipeline("trl", {"truncation_mode": "keep_end"})
    with pytest.raises(PipelineError, match="max_length"):
        load_pipeline("trl", {"max_length": 0})
    with pytest.raises(PipelineError, match="assistant_only_loss"):
        load_pipeline("trl", {"assistant_only_loss": "yes"})
    assert load_pipeline("trl", {"assistant_only_loss": True}).assistant_only_loss


def test_idefics3_fails_when_only_the_closing_marker_is_cut():
    """SmolVLM's processor finds each image's replacement by its last character: a cut right after the
    image tokens, before `<fake_token_around_image>`, fails there although no image token is lost."""
    processor = real_processor(PROCESSORS / "smolvlm-256m-instruct")
    image_end = 1132  # llava row 15: its image's tokens end at 1132, the closing marker is token 1132
    for max_length, expected in (
        (image_end - 1, "crash"),
        (image_end, "crash"),
        (image_end + 1, "truncated"),
    ):
        result = _fates("smolvlm-256m-instruct", "llava/data.jsonl", max_length=max_length)[15]
        assert result.trainer.status == expected, (max_length, result.trainer.reason)
        assert (_live(processor, result.sample, max_length) is None) == (expected == "crash")
