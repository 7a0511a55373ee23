"""The tiktoken counter of the built-in Qwen profiles gives the lengths the profile's tokenizer gives."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_profiles import FRAGMENTS
from vlmlint.models import load_model, profiles
from vlmlint.models.qwen_lengths import QwenLengths, counter_for

ADDED = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|endoftext|>",
         "<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_start", "im_end|>", "<", ">", "|"]  # fmt: skip
COMBINING = ["\u0301", "\u0338", "\u030a", "e\u0301", "A\u030a", "\u1100\u1161", "ﬁ", "Ω"]


@pytest.fixture(scope="module", params=["qwen2-vl", "qwen3-vl", "llava-onevision"])
def profile_model(request, vlmlint_cache):
    model = load_model(request.param)
    counter = counter_for(profiles.find_profile(request.param), model.tokenizer, False)
    assert isinstance(counter, QwenLengths)
    return model.tokenizer, counter


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.lists(
            st.one_of(st.sampled_from(FRAGMENTS + ADDED + COMBINING), st.text(max_size=16)), max_size=12
        ).map("".join),
        min_size=1,
        max_size=6,
    )
)
def test_counts_equal_the_profile_tokenizer(profile_model, texts):
    tokenizer, counter = profile_model
    for add in (False, True):
        expected = [len(ids) for ids in tokenizer(texts, add_special_tokens=add)["input_ids"]]
        assert counter(texts) == expected


def test_only_for_the_qwen_profiles(vlmlint_cache):
    pixtral = load_model("pixtral")
    assert counter_for(profiles.find_profile("pixtral"), pixtral.tokenizer, True) is None
    assert counter_for(None, load_model("qwen2-vl").tokenizer, False) is None  # a folder or hub id


def test_scan_uses_it_and_counts_are_unchanged():
    from tests.conftest import DATASETS
    from vlmlint.config import build_config
    from vlmlint.engine import Scanner

    config = build_config(str(DATASETS / "demo"), {}, {"jobs": 1})
    fast = Scanner(config)
    lengths = [o.result.seq_len for o in fast.scan()]
    assert isinstance(fast._fast_lengths, QwenLengths)
    plain = Scanner(config)
    plain._fast_lengths = None  # tokenizer(...) itself
    assert [o.result.seq_len for o in plain.scan()] == lengths
