"""Differential tests: vlmlint's Gemma 4 count and expansion against the real Gemma4Processor.

The real side is transformers' own code: `get_aspect_ratio_preserving_size` of
image_processing_pil_gemma4, Gemma4ImageProcessorPil's preprocess, and Gemma4Processor built from the
fixture folder (fixtures/support.py's real_processor: its video processor and audio feature extractor,
which need torch, are absent). Counts are <|image|> ids in input_ids, <|image> / <image|> ids, and the
resized size read back from the image_position_ids the processor returns.
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import support as harness
from tests.conftest import PROCESSORS
from tests.families._releases import needs, records
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, ModelError, Run, gemma4, load_model
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "gemma-4-e4b-it"
HUB = gemma4.Gemma4Settings()  # the hub's settings are the class defaults (fixtures/families/gemma4.py)


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def real_size(height: int, width: int, s: gemma4.Gemma4Settings) -> tuple[int, int] | str:
    from transformers.models.gemma4.image_processing_pil_gemma4 import get_aspect_ratio_preserving_size

    try:
        return get_aspect_ratio_preserving_size(
            height=height,
            width=width,
            patch_size=s.patch_size,
            max_patches=s.max_patches,
            pooling_kernel_size=s.pooling_kernel_size,
        )
    except ValueError as exc:
        return str(exc)


def mine_size(height: int, width: int, s: gemma4.Gemma4Settings) -> tuple[int, int] | str:
    try:
        return gemma4.aspect_ratio_preserving_size(height, width, s)
    except CountError as exc:
        return str(exc)


def real_pipeline(processor, height: int, width: int, **call_kwargs) -> dict:
    """What processor(text, images) gives for a one-image prompt."""
    tokenizer = processor.tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=["<|image|>"], images=[image(height, width)], **call_kwargs)
    ids = list(output["input_ids"][0])
    positions = np.asarray(output["image_position_ids"][0])
    real = positions[positions[:, 0] >= 0]
    patch = call_kwargs.get("patch_size", 16)
    return {
        "soft": ids.count(tokenizer.convert_tokens_to_ids("<|image|>")),
        "boi": ids.count(tokenizer.convert_tokens_to_ids("<|image>")),
        "eoi": ids.count(tokenizer.convert_tokens_to_ids("<image|>")),
        "grid": (int(real[:, 1].max()) + 1, int(real[:, 0].max()) + 1),
        "shape": ((int(real[:, 1].max()) + 1) * patch, (int(real[:, 0].max()) + 1) * patch),
    }


def assert_count_matches_pipeline(processor, height: int, width: int, s: gemma4.Gemma4Settings, **kw) -> None:
    real = real_pipeline(processor, height, width, **kw)
    got = gemma4.count(height, width, s)
    assert got.tokens == real["soft"], (height, width, s)
    assert real["boi"] == real["eoi"] == 1
    assert got.grid == real["grid"]
    assert (got.resized_height, got.resized_width) == real["shape"]


# -- settings ------------------------------------------------------------------------------------


def test_load_model_picks_gemma4_and_reads_the_hub_settings():
    model = load_model(str(FOLDER))
    assert model.family is gemma4.FAMILY
    assert model.counted_by() == "formula (family gemma4)"
    assert model.settings == HUB
    assert model.family.placeholder == "<|image|>"
    assert model.max_position_embeddings == 131072
    assert gemma4.FAMILY.add_special_tokens


def test_tokenizer_init_kwargs_override_the_image_processor(tmp_path):
    """max_soft_tokens in tokenizer_config.json wins over the image processor's (_merge_kwargs step 5)."""
    folder = tmp_path / "gemma4-budget"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["max_soft_tokens"] = 70
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.image_processor.max_soft_tokens == 280
    assert model.settings.max_soft_tokens == 70
    processor = harness.real_processor(folder)
    assert real_pipeline(processor, 600, 800)["soft"] == 63 == gemma4.count(600, 800, model.settings).tokens


@records(
    "5.24.0",
    "5.5.0's and 5.8.0's Gemma4Processor accepts a tokenizer without boa_token / eoa_token, which vlmlint refuses on every release (not yet followed)",
)
def test_a_tokenizer_without_audio_markers_is_refused_like_the_processor(tmp_path):
    """Gemma4Processor.validate_inputs raises on every call when boa_token / eoa_token are missing."""
    folder = tmp_path / "gemma4-no-audio"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["extra_special_tokens"] = {
        k: v for k, v in config["extra_special_tokens"].items() if k not in ("boa_token", "eoa_token")
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    processor = harness.real_processor(folder)
    with pytest.raises(ValueError, match="audio_token"):
        processor(text=["no image here"])
    with pytest.raises(ModelError, match="boa_token"):
        load_model(str(folder))


# -- the resize --------------------------------------------------------------------------------


SIZE_EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (1, 100000),  # a width that would give 100000 x 48 px is capped at max_soft_tokens columns
    (100000, 1),
    (3, 7),
    (48, 48),
    (10, 10),  # upscaled to 768 x 768
    (672, 960),  # exactly 280 soft tokens: not resized at all
    (1344, 1920),  # twice that: factor 0.5, exact
    (2016, 2880),  # three times: factor 1/3 in floats, 671.999... or 672
    (803, 803),
    (804, 804),
    (16, 2000),  # one pooled row by the floor, not by the fallback
    (10, 2000),  # still the floor: 48 x 11328
    (8, 2000),  # ratio 1/250: the floor
    (7, 2000),  # ratio under 1/280: height floors to 0, the fallback branch, width at its cap
    (2000, 7),
    (47, 13440),
    (480, 640),
    (1080, 1920),
    (3000, 4000),
]


@pytest.mark.parametrize("height,width", SIZE_EDGES)
@pytest.mark.parametrize("max_soft_tokens", gemma4.SUPPORTED_SOFT_TOKENS)
def test_size_edges_match_the_real_function(height, width, max_soft_tokens):
    s = gemma4.Gemma4Settings(max_soft_tokens=max_soft_tokens)
    assert mine_size(height, width, s) == real_size(height, width, s)


def test_the_edges_reach_each_branch():
    """Upscaled, exact (no resize), floored, and the zero-side fallback capped at max_soft_tokens columns."""
    assert (gemma4.count(10, 10, HUB).resized_height, gemma4.count(10, 10, HUB).tokens) == (768, 256)
    assert gemma4.count(672, 960, HUB) == gemma4.ImageCount(672, 960, (42, 60), 280)
    assert gemma4.count(10, 2000, HUB) == gemma4.ImageCount(48, 11328, (3, 708), 236)
    assert gemma4.count(7, 2000, HUB) == gemma4.ImageCount(48, 13440, (3, 840), 280)
    assert gemma4.count(2000, 7, HUB) == gemma4.ImageCount(13440, 48, (840, 3), 280)


@settings(max_examples=400, deadline=None)
@given(
    height=st.integers(1, 30000),
    width=st.integers(1, 30000),
    max_soft_tokens=st.sampled_from(gemma4.SUPPORTED_SOFT_TOKENS),
    patch_size=st.sampled_from([8, 14, 16, 28]),
    kernel=st.integers(1, 4),
)
@example(height=1, width=30000, max_soft_tokens=70, patch_size=16, kernel=3)
@example(height=2016, width=2880, max_soft_tokens=280, patch_size=16, kernel=3)
def test_size_matches_the_real_function_for_any_settings(height, width, max_soft_tokens, patch_size, kernel):
    s = gemma4.Gemma4Settings(
        patch_size=patch_size, pooling_kernel_size=kernel, max_soft_tokens=max_soft_tokens
    )
    assert mine_size(height, width, s) == real_size(height, width, s)


@settings(max_examples=300, deadline=None)
@given(
    height=st.integers(1, 8000),
    width=st.integers(1, 8000),
    max_soft_tokens=st.sampled_from(gemma4.SUPPORTED_SOFT_TOKENS),
)
def test_the_soft_tokens_stay_within_the_budget(height, width, max_soft_tokens):
    s = gemma4.Gemma4Settings(max_soft_tokens=max_soft_tokens)
    got = gemma4.count(height, width, s)
    assert 1 <= got.tokens <= max_soft_tokens
    assert got.resized_height % 48 == 0 and got.resized_width % 48 == 0
    assert got.tokens == (got.grid[0] // 3) * (got.grid[1] // 3)


# -- the whole pipeline --------------------------------------------------------------------------

PIPELINE_EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (10, 2000),
    (7, 2000),
    (2000, 7),
    (10, 10),
    (672, 960),
    (1344, 1920),
    (2016, 2880),
    (480, 640),
    (1080, 1920),
    (3000, 4000),
]


@pytest.mark.parametrize("height,width", PIPELINE_EDGES)
def test_pipeline_edges(processor, height, width):
    assert_count_matches_pipeline(processor, height, width, HUB)


@pytest.mark.parametrize("max_soft_tokens", gemma4.SUPPORTED_SOFT_TOKENS)
@pytest.mark.parametrize("height,width", [(1, 1), (5, 3000), (600, 800), (1500, 1000)])
def test_pipeline_at_each_budget(processor, height, width, max_soft_tokens):
    s = gemma4.Gemma4Settings(max_soft_tokens=max_soft_tokens)
    assert_count_matches_pipeline(processor, height, width, s, max_soft_tokens=max_soft_tokens)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1600),
    width=st.integers(1, 1600),
    max_soft_tokens=st.sampled_from(gemma4.SUPPORTED_SOFT_TOKENS),
)
def test_random_sizes_match_the_pipeline(processor, height, width, max_soft_tokens):
    s = gemma4.Gemma4Settings(max_soft_tokens=max_soft_tokens)
    # call-time kwargs override the processor's defaults, as a user's collator would pass them
    assert_count_matches_pipeline(processor, height, width, s, max_soft_tokens=max_soft_tokens)


def test_an_unsupported_budget_is_refused_like_the_image_processor(processor):
    s = gemma4.Gemma4Settings(max_soft_tokens=100)
    with pytest.raises(ValueError, match="must be one of") as real:
        processor(text=["<|image|>"], images=[image(100, 100)], max_soft_tokens=100)
    with pytest.raises(CountError) as mine:
        gemma4.count(100, 100, s)
    assert str(mine.value) == str(real.value)


@pytest.mark.parametrize("height,width", [(64, 96), (48, 16), (672, 960)])
def test_without_resize_whole_patches_are_counted_as_they_are(processor, height, width):
    s = gemma4.Gemma4Settings(do_resize=False)
    assert_count_matches_pipeline(processor, height, width, s, do_resize=False)


@pytest.mark.parametrize("height,width", [(50, 64), (64, 50), (1, 1)])
def test_without_resize_partial_patches_are_refused(processor, height, width):
    with pytest.raises(ValueError):
        processor(text=["<|image|>"], images=[image(height, width)], do_resize=False)
    with pytest.raises(CountError, match="not whole 16-px patches"):
        gemma4.count(height, width, gemma4.Gemma4Settings(do_resize=False))


@pytest.mark.parametrize("height,width", [(1, 1), (300, 1000), (1000, 300), (672, 960), (10, 2000)])
def test_count_exact_matches_count(height, width):
    model = load_model(str(FOLDER))
    images = [image(height, width), image(width, height)]
    exact = gemma4.count_exact(model.image_processor, images, model.settings)
    assert exact == [gemma4.count(height, width, model.settings), gemma4.count(width, height, model.settings)]


def test_transformers_helper_agrees(processor):
    sizes = [(1, 1), (480, 640), (10, 2000), (3000, 4000)]
    helper = processor._get_num_multimodal_tokens(image_sizes=sizes)
    assert helper["num_image_tokens"] == [gemma4.count(h, w, HUB).tokens for h, w in sizes]


# -- expansion and whole prompts -----------------------------------------------------------------


def expanded(segments) -> str:
    return "".join(s.token * s.count if isinstance(s, Run) else s for s in segments)


@pytest.mark.parametrize("tokens", [1, 63, 266, 280])
def test_expand_is_the_processors_replacement(processor, tokens):
    count = gemma4.ImageCount(48, 48, (3, 3), tokens)
    assert gemma4.expand(count, HUB) == ("<|image>", Run("<|image|>", tokens), "<image|>")
    assert expanded(gemma4.expand(count, HUB)) == needs(processor, "replace_image_token")(
        {"num_soft_tokens_per_image": [tokens]}, 0
    )


def conversation(n_images: int, text: str, answer: str | None = "It is a picture.") -> list[dict]:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    if answer is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return messages


@pytest.mark.parametrize(
    "sizes",
    [[(300, 1000)], [(1, 1)], [(1000, 300), (48, 48)], [(2016, 2880), (10, 2000)], [(640, 480)] * 3],
)
@pytest.mark.parametrize("text", ["Describe this image.", "  What is here?\n"])
def test_whole_prompt_input_ids_match_the_processor(processor, scanner, sizes, text):
    """The fixture's chat template rendered by vlmlint and by the processor, then composed and
    tokenized by vlmlint: the same input_ids length and ids as processor(text, images)."""
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    answer = Message(Role.ASSISTANT, (Part(text="It is a picture."),))
    rendered = scanner.render((Message(Role.USER, parts), answer))
    assert rendered == processor.apply_chat_template(conversation(len(sizes), text), tokenize=False)
    counts = [gemma4.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[rendered], images=[[image(h, w) for h, w in sizes]])
    ids = list(output["input_ids"][0])
    mine = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine["input_ids"]) + saved == len(ids)
    full = composed
    for count in counts:  # each run is written once: write it out in full to compare the ids
        full = full.replace(
            "<|image>" + "<|image|>" + "<image|>", "<|image>" + "\0" * count.tokens + "<image|>", 1
        )
    assert scanner.model.tokenizer(full.replace("\0", "<|image|>"))["input_ids"] == ids
    bos = processor.tokenizer.bos_token_id
    assert ids[:2] == [bos, bos]  # the template's <bos> and the tokenizer's


def test_scan_of_a_dataset_matches_the_processor(tmp_path):
    """vlmlint scan --model <fixture> against the real processor, row by row (one- and two-image rows)."""
    built = harness.Built("gemma4", FOLDER, "Gemma4Processor", "<|image|>", "<|image|>", 0)
    processor = harness.real_processor(FOLDER)
    built.image_token_id = processor.tokenizer.convert_tokens_to_ids("<|image|>")
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)
