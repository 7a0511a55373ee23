"""Issue 19's built-in profiles (gemma-4 ... internvl3.5): offline loading, provenance, the family each
loads into, the demo scan, the exact Qwen-based tokenizers on their real ids, and, where the real processor
runs here, the formula's counts against the real processor's (the fallback route) row by row."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DATASETS
from vlmlint.config import ScanConfig, build_config
from vlmlint.engine import Scanner
from vlmlint.models import ModelError, load_model, profiles
from vlmlint.models.registry import family_for_class

# profile -> the family names its processor class may land in (issue 19's modules name them).
FAMILY = {
    "gemma-4": {"gemma4"},
    "glm-4.1v": {"glm4v"},
    "glm-4.6v": {"glm4v", "glm46v"},
    "minicpm-v-4.6": {"minicpmv", "minicpmv4_6", "minicpm_v"},
    "qwen2.5-omni": {"qwen_omni", "qwen2_5_omni"},
    "kimi-k2.5": {"kimi_k25"},
    "llama-4": {"llama4"},
    "lfm2-vl": {"lfm2_vl"},
    "phi-4-mm": {"phi4_multimodal"},
    "molmo2": {"molmo2"},
    "ernie-4.5-vl": {"ernie_vl", "ernie4_5_vl"},
    "paddleocr-vl": {"paddleocr_vl"},
    "internvl3.5": {"internvl"},
}
PROCESSOR_CLASS = {
    "gemma-4": "Gemma4Processor",
    "glm-4.1v": "Glm4vProcessor",
    "glm-4.6v": "Glm46VProcessor",
    "minicpm-v-4.6": "MiniCPMV4_6Processor",
    "qwen2.5-omni": "Qwen2_5OmniProcessor",
    "kimi-k2.5": "Kimi_K25Processor",
    "llama-4": "Llama4Processor",
    "lfm2-vl": "Lfm2VlProcessor",
    "phi-4-mm": "Phi4MultimodalProcessor",
    "molmo2": "Molmo2Processor",
    "ernie-4.5-vl": "Ernie4_5_VLMoeProcessor",
    "paddleocr-vl": "PaddleOCRVLProcessor",
    "internvl3.5": "InternVLProcessor",
}
EXACT = {"qwen2.5-omni", "internvl3.5"}
# Processors whose image processor needs torchvision: without their family the profile is refused here.
TORCHVISION_ONLY = {"kimi-k2.5", "llama-4", "lfm2-vl", "phi-4-mm", "molmo2"}
NAMES = list(FAMILY)


def _landed(name: str) -> bool:
    family = family_for_class(PROCESSOR_CLASS[name])
    return family is not None and family.name in FAMILY[name]


def _needs_family(name: str):
    """xfail (not strict) while the profile's family module has not landed in the registry."""
    if _landed(name):
        return name
    return pytest.param(
        name,
        marks=pytest.mark.xfail(reason=f"{PROCESSOR_CLASS[name]}'s family not registered yet", strict=False),
    )


@pytest.fixture(autouse=True)
def _cache(vlmlint_cache):  # conftest: one session cache for the prepared profile folders
    return vlmlint_cache


@pytest.mark.parametrize("name", NAMES)
def test_profile_names_its_checkpoint_and_sources(name):
    profile = profiles.find_profile(name)
    assert profile is not None and profile.name == name
    assert profile.exact_text == (name in EXACT)
    files = profiles.profile_settings(profile)
    assert "config.json" in files and "tokenizer_config.json" in files
    processor_class = next(c["processor_class"] for c in files.values() if c.get("processor_class"))
    assert processor_class == PROCESSOR_CLASS[name]
    folder = profiles._data_dir() / name
    provenance = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
    assert provenance["checkpoint"] == profile.checkpoint
    for written in [*files, "chat_template.jinja"]:
        if written == "tokenizer_config.json" and not profile.exact_text:
            continue  # a stand-in's tokenizer file is the stand-in's; its source line is "tokenizer"
        assert any(written.startswith(key.split(".")[0]) for key in provenance["sources"]) or (
            written in ("processor_config.json", "tokenizer_config.json")
        ), f"{name}: no source line for {written}"
    assert "tokenizer" in provenance["sources"]


@pytest.mark.parametrize("name", [n for n in NAMES if n not in TORCHVISION_ONLY or _landed(n)])
def test_profile_loads_offline_with_its_limits(name):
    model = load_model(name)
    assert model.profile == name and model.checkpoint == profiles.PROFILES[name].checkpoint
    assert (model.text_tokens_estimated is None) == (name in EXACT)
    config = profiles.profile_settings(profiles.PROFILES[name])["config.json"]
    sections = [
        config,
        config.get("text_config", {}),
        config.get("thinker_config", {}).get("text_config", {}),
    ]
    limit = next(s["max_position_embeddings"] for s in sections if "max_position_embeddings" in s)
    assert limit >= 32768
    assert model.max_position_embeddings == limit  # qwen2.5-omni's sits in thinker_config.text_config


@pytest.mark.parametrize("name", [_needs_family(n) for n in NAMES])
def test_profile_loads_into_its_family(name):
    assert load_model(name).family.name in FAMILY[name]


@pytest.mark.parametrize("name", [n if n not in TORCHVISION_ONLY else _needs_family(n) for n in NAMES])
def test_demo_scan_exits_0_or_1(name):
    from typer.testing import CliRunner

    from vlmlint.cli import app

    result = CliRunner().invoke(app, ["scan", str(DATASETS / "demo"), "--model", name, "--verify", "0", "-q"])
    assert result.exit_code in (0, 1), result.output
    assert "rows scanned" in result.output


def test_refused_profiles_say_why():
    for name in TORCHVISION_ONLY:
        if _landed(name):
            continue
        with pytest.raises(ModelError, match="torchvision"):
            load_model(name)


# --- the exact (Qwen language model) profiles ------------------------------------------------------------


def test_qwen25_omni_tokens_are_the_checkpoints():
    tok = load_model("qwen2.5-omni").tokenizer
    assert tok("Hello world", add_special_tokens=False)["input_ids"] == [9707, 1879]
    assert tok.convert_tokens_to_ids(
        [
            "<|AUDIO|>",
            "<|audio_bos|>",
            "<|audio_eos|>",
            "<|vision_bos|>",
            "<|vision_eos|>",
            "<|IMAGE|>",
            "<|VIDEO|>",
        ]
    ) == [151646, 151647, 151648, 151652, 151653, 151655, 151656]
    assert len(tok) - 1 == tok.convert_tokens_to_ids("<|file_sep|>") == 151664
    thinker = profiles.profile_settings(profiles.PROFILES["qwen2.5-omni"])["config.json"]["thinker_config"]
    assert (thinker["image_token_index"], thinker["video_token_index"], thinker["audio_token_index"]) == (
        151655,
        151656,
        151646,
    )


def test_internvl35_tokens_are_the_checkpoints():
    model = load_model("internvl3.5")
    tok = model.tokenizer
    assert tok("Hello world", add_special_tokens=False)["input_ids"] == [9707, 1879]
    assert tok.convert_tokens_to_ids(["</think>", "<img>", "</img>", "<IMG_CONTEXT>", "</box>"]) == [
        151668,
        151669,
        151670,
        151671,
        151677,
    ]
    config = profiles.profile_settings(profiles.PROFILES["internvl3.5"])["config.json"]
    assert config["image_token_id"] == tok.convert_tokens_to_ids("<IMG_CONTEXT>")


# --- the stand-in profiles: their config ids are their tokenizer's ----------------------------------------

STANDIN_IMAGE_ID = {
    "gemma-4": ("image_token_id", "<|image|>"),
    "glm-4.1v": ("image_token_id", "<|image|>"),
    "glm-4.6v": ("image_token_id", "<|image|>"),
    "minicpm-v-4.6": ("image_token_id", "<|image_pad|>"),
    "kimi-k2.5": ("media_placeholder_token_id", "<|media_pad|>"),
    "llama-4": ("image_token_index", "<|patch|>"),
    "lfm2-vl": ("image_token_id", "<image>"),
    "molmo2": ("image_token_id", "<|image|>"),
    "ernie-4.5-vl": ("image_token_id", "<|IMAGE_PLACEHOLDER|>"),
    "paddleocr-vl": ("image_token_id", "<|IMAGE_PLACEHOLDER|>"),
}


@pytest.mark.parametrize("name", list(STANDIN_IMAGE_ID))
def test_standin_config_ids_are_the_tokenizers(name):
    import gzip

    from tokenizers import Tokenizer

    key, token = STANDIN_IMAGE_ID[name]
    config = profiles.profile_settings(profiles.PROFILES[name])["config.json"]
    data = gzip.decompress((profiles._data_dir() / "tokenizers" / f"{name}.json.gz").read_bytes())
    assert config[key] == Tokenizer.from_str(data.decode("utf-8")).token_to_id(token)


# --- formula against the real processor, where the real processor runs here -------------------------------


def _rows(model):
    config = build_config(str(DATASETS / "demo"), {"model": model.name}, {"jobs": 1})
    scanner = Scanner(ScanConfig(**{**config.__dict__}), model=model)
    return {
        outcome.result.sample.location: (outcome.result.seq_len, list(outcome.result.image_tokens))
        for outcome in scanner.scan()
        if outcome.result.seq_len is not None
    }


@pytest.mark.parametrize("name", [_needs_family(n) for n in NAMES if n not in TORCHVISION_ONLY])
def test_demo_formula_equals_the_real_processor(name):
    """The demo through the family's formula and through the real processor (the fallback route on the
    same profile folder): the same sequence length and image tokens on every counted row."""
    formula = load_model(name)
    assert formula.family.count_row is None  # a formula, not the fallback
    real = load_model(name, force_fallback=True)
    assert real.family.count_row is not None
    got, expected = _rows(formula), _rows(real)
    assert len(expected) >= 30
    assert got == expected
