"""The Rust batch encoder vlmlint uses for lengths gives what tokenizer(...) gives, for every fixture."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import PROCESSORS
from vlmlint.engine import _fast_encoder
from vlmlint.models import load_model

FOLDERS = sorted(p.name for p in PROCESSORS.iterdir() if (p / "tokenizer.json").is_file())
SPECIAL = [
    "<image>",
    "<|image_pad|>",
    "<|im_start|>",
    "[IMG]",
    "<s>",
    "</s>",
    "<start_of_image>",
    "<fake_token_around_image>",
]


@pytest.fixture(scope="module", params=FOLDERS)
def tokenizer(request):
    return load_model(str(PROCESSORS / request.param)).tokenizer


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.one_of(st.text(max_size=30), st.sampled_from(SPECIAL))).map("".join), max_size=8))
def test_fast_lengths_equal_transformers(tokenizer, texts):
    for add in (False, True):
        encode = _fast_encoder(tokenizer, add)
        if encode is None:
            continue
        expected = (
            [len(ids) for ids in tokenizer(texts, add_special_tokens=add)["input_ids"]] if texts else []
        )
        assert [len(e) for e in encode(texts, add_special_tokens=add)] == expected


def test_refused_when_special_tokens_are_split():
    tokenizer = load_model(str(PROCESSORS / "qwen2-vl")).tokenizer
    assert _fast_encoder(tokenizer, False) is not None
    tokenizer.split_special_tokens = True
    try:
        assert _fast_encoder(tokenizer, False) is None
    finally:
        tokenizer.split_special_tokens = False
