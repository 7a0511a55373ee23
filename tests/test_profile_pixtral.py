"""The pixtral profile: Pixtral-12B's real Tekken BPE (mistral-common's tekken_240911.json, converted
with transformers' MistralConverter), against mistral-common's own Tekkenizer and, for whole rows,
transformers' PixtralProcessor built from the profile folder."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.profile_checks import scan_equals_real_processor, second_load_does_not_rebuild
from tests.test_profiles import CORPUS, FRAGMENTS
from vlmlint.models import load_model, profiles

IMG, IMG_BREAK, IMG_END = 10, 12, 13
# Surface forms of Tekken's special tokens: HF matches them as special tokens, Tekkenizer.encode as text.
SPECIAL = re.compile(r"\[/?[A-Z_]+\]|</?s>|<unk>|<pad>|<SPECIAL_\d+>")


@pytest.fixture(scope="session")
def pixtral(vlmlint_cache):
    return load_model("pixtral")


@pytest.fixture(scope="session")
def tekken():
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path, _ = profiles.tekken_file()
    return Tekkenizer.from_file(str(path))


def test_is_exact_with_the_checkpoint_special_tokens(pixtral, tekken):
    assert profiles.PROFILES["pixtral"].exact_text and pixtral.text_tokens_estimated is None
    tok = pixtral.tokenizer
    assert len(tok) == tekken.n_words == 131072
    names = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]"]
    assert tok.convert_tokens_to_ids(names) == [0, 1, 2, 3, 4, IMG, 11, IMG_BREAK, IMG_END]
    assert [tekken.id_to_piece(i) for i in (0, 1, 2, 3, 4, IMG, 11, IMG_BREAK, IMG_END)] == names
    assert tok("[IMG][IMG_BREAK][IMG][IMG_END]", add_special_tokens=False)["input_ids"] == [
        IMG,
        IMG_BREAK,
        IMG,
        IMG_END,
    ]
    assert (tok.bos_token, tok.eos_token, tok.pad_token, tok.unk_token) == ("<s>", "</s>", "<pad>", "<unk>")
    # As the HF pixtral-12b tokenizer: <s> prepended, no </s> appended.
    assert (
        tok("Hello world")["input_ids"]
        == [1, 22177, 4304]
        == tekken.encode("Hello world", bos=True, eos=False)
    )
    config = profiles.profile_settings(profiles.PROFILES["pixtral"])
    assert config["config.json"]["image_token_index"] == IMG
    assert config["processor_config.json"]["image_token"] == "[IMG]"


def test_mistral_small_stays_estimated():
    assert load_model("mistral-small-3.1").text_tokens_estimated


@pytest.mark.parametrize("text", CORPUS)
def test_fixed_corpus_equals_tekkenizer(pixtral, tekken, text):
    assert pixtral.tokenizer(text, add_special_tokens=False)["input_ids"] == tekken.encode(
        text, bos=False, eos=False
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(FRAGMENTS + ["[INST]", "<s>", "  \n", "ÉCOLE", "McDonald's", "x/y/z\n"]),
            st.text(max_size=24),
            st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24),
        ),
        max_size=10,
    ).map("".join)
)
def test_random_text_equals_tekkenizer(pixtral, tekken, text):
    if SPECIAL.search(text):
        return
    assert pixtral.tokenizer(text, add_special_tokens=False)["input_ids"] == tekken.encode(
        text, bos=False, eos=False
    )


def test_llava_scan_equals_the_real_processor(pixtral):
    """`vlmlint scan fixtures/datasets/llava --model pixtral` against transformers' PixtralProcessor
    built from the same profile folder: real Tekken tokenizer, settings and chat template."""
    rows = scan_equals_real_processor("pixtral", pixtral, IMG)  # [IMG] only, as reported
    assert all(ids.count(IMG_END) == images for ids, images in rows)
    assert len(rows) >= 10


def test_second_load_does_not_rebuild(tmp_path, monkeypatch):
    second_load_does_not_rebuild(
        tmp_path, monkeypatch, "pixtral", "build_tekken", "_tekken_identity", "tekken-*.json"
    )
