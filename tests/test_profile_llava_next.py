"""The llava-next profile: Mistral-7B's real SentencePiece BPE (mistral-common's tokenizer.model.v1).

Three independent checks: (1) the vocabulary and merges equal what transformers' own SentencePiece
conversion makes of the same file; (2) token ids equal sentencepiece's own encoding, segment by segment
between special tokens, as a Llama-2-era tokenizer.json does ("legacy" prefixing of every segment);
(3) whole rows: `vlmlint scan` equals transformers' LlavaNextProcessor built from the profile folder.

Known and expected: on runs of two or more spaces (or a segment that starts with a space) the HF BPE
and sentencepiece split whitespace differently (sentencepiece pre-splits at every space, tokenizers
does not). vlmlint follows the HF tokenizer, which is what training uses, so (2) leaves those out.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.profile_checks import scan_equals_real_processor, second_load_does_not_rebuild
from tests.test_profiles import CORPUS, FRAGMENTS
from vlmlint.models import load_model, profiles

IMAGE, PAD = 32000, 32001
SPECIAL = ("<image>", "<pad>", "<s>", "</s>", "<unk>")
SPLIT = re.compile("(" + "|".join(map(re.escape, SPECIAL)) + ")")


@pytest.fixture(scope="session")
def llava_next(vlmlint_cache):
    return load_model("llava-next")


@pytest.fixture(scope="session")
def sentencepiece_model():
    sentencepiece = pytest.importorskip("sentencepiece")
    path, _ = profiles.mistral_v1_file()
    return sentencepiece.SentencePieceProcessor(model_file=str(path))


def _legacy_ids(tokenizer, sp, text: str) -> list[int] | None:
    """sentencepiece on every stretch between special tokens; None where whitespace runs diverge."""
    ids = []
    for segment in filter(None, SPLIT.split(text)):
        if segment in SPECIAL:
            ids.append(tokenizer.convert_tokens_to_ids(segment))
        elif "  " in segment or segment.startswith(" "):
            return None
        else:
            ids.extend(sp.encode(segment))
    return ids


def test_is_exact_with_the_checkpoint_special_tokens(llava_next, sentencepiece_model):
    assert profiles.PROFILES["llava-next"].exact_text and llava_next.text_tokens_estimated is None
    tok = llava_next.tokenizer
    assert len(tok) == sentencepiece_model.get_piece_size() + 2 == 32002
    assert tok.convert_tokens_to_ids(["<unk>", "<s>", "</s>", "<image>", "<pad>"]) == [0, 1, 2, IMAGE, PAD]
    assert tok("Hello world")["input_ids"] == [1, 22557, 1526]  # <s> prepended, as the checkpoint does
    assert sentencepiece_model.encode("Hello world") == [22557, 1526]
    assert tok("<image>\n<image>", add_special_tokens=False)["input_ids"] == [IMAGE, 28705, 13, IMAGE]
    config = profiles.profile_settings(profiles.PROFILES["llava-next"])
    assert config["config.json"]["image_token_index"] == IMAGE
    assert config["processor_config.json"]["image_token"] == "<image>"


def test_vocabulary_and_merges_equal_transformers_conversion(llava_next, tmp_path):
    """transformers converts tokenizer.model itself (SentencePieceExtractor, needs protobuf)."""
    pytest.importorskip("google.protobuf")
    import shutil

    from transformers import LlamaTokenizer

    path, _ = profiles.mistral_v1_file()
    shutil.copyfile(path, tmp_path / "tokenizer.model")
    reference = json.loads(LlamaTokenizer.from_pretrained(str(tmp_path)).backend_tokenizer.to_str())
    ours = json.loads(profiles.mistral_v1_json().read_text(encoding="utf-8"))
    assert ours["model"]["vocab"] == reference["model"]["vocab"]
    assert [tuple(m) for m in ours["model"]["merges"]] == [tuple(m) for m in reference["model"]["merges"]]
    assert ours["model"]["byte_fallback"] is reference["model"]["byte_fallback"] is True


@pytest.mark.parametrize("text", CORPUS)
def test_fixed_corpus_equals_sentencepiece(llava_next, sentencepiece_model, text):
    expected = _legacy_ids(llava_next.tokenizer, sentencepiece_model, text)
    if expected is None:
        pytest.skip("runs of spaces: HF and sentencepiece split whitespace differently (module docstring)")
    assert llava_next.tokenizer(text, add_special_tokens=False)["input_ids"] == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(FRAGMENTS + list(SPECIAL) + ["[INST] ", " [/INST]", "\n", "ÉCOLE", "x/y\n"]),
            st.text(max_size=24),
            st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24),
        ),
        max_size=10,
    ).map("".join)
)
def test_random_text_equals_sentencepiece(llava_next, sentencepiece_model, text):
    expected = _legacy_ids(llava_next.tokenizer, sentencepiece_model, text)
    if expected is not None:
        assert llava_next.tokenizer(text, add_special_tokens=False)["input_ids"] == expected


def test_llava_scan_equals_the_real_processor(llava_next):
    """`vlmlint scan fixtures/datasets/llava --model llava-next` against transformers' LlavaNextProcessor
    built from the same profile folder: real Mistral-7B tokenizer, settings and chat template."""
    assert len(scan_equals_real_processor("llava-next", llava_next, IMAGE)) >= 10


def test_second_load_does_not_rebuild(tmp_path, monkeypatch):
    second_load_does_not_rebuild(
        tmp_path,
        monkeypatch,
        "llava-next",
        "build_sentencepiece_bpe",
        "_mistral_v1_identity",
        "mistral-v1-*.json",
    )
